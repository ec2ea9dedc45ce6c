/**
 * A small stand-in for the `vscode` module: enough of the API for the extension to activate and
 * run its commands under plain Node. Tests script the user's answers through `ui` and read what
 * the extension showed from `shown`.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import Module from "node:module";
import { dirname, join, relative } from "node:path";

type Listener<T> = (value: T) => unknown;

export class EventEmitter<T> {
  private listeners = new Set<Listener<T>>();
  readonly event = (listener: Listener<T>) => {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  };
  fire(value: T): void {
    for (const listener of [...this.listeners]) listener(value);
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly path: string,
  ) {}
  static parse(value: string): Uri {
    const colon = value.indexOf(":");
    return new Uri(value.slice(0, colon), value.slice(colon + 1).replace(/^\/\/[^/]*/, ""));
  }
  static file(path: string): Uri {
    return new Uri("file", path);
  }
  static from(parts: { scheme: string; path: string }): Uri {
    return new Uri(parts.scheme, parts.path);
  }
  static joinPath(base: Uri, ...segments: string[]): Uri {
    return new Uri(base.scheme, [base.path, ...segments].join("/"));
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return this.scheme === "file" ? `file://${encodeURI(this.path)}` : `${this.scheme}:${this.path}`;
  }
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

/** The replacements of a workspace edit, as `applyEdit` records them in `edits`. */
export class WorkspaceEdit {
  readonly replacements: { uri: Uri; range: Range; text: string }[] = [];
  replace(uri: Uri, range: Range, text: string): void {
    this.replacements.push({ uri, range, text });
  }
}

/** The workspace edits the extension applied, in order (the test's documents apply them). */
export const edits: WorkspaceEdit[] = [];

/** The documents open in the "editor" (`workspace.textDocuments`), set by the tests. */
export const textDocuments: unknown[] = [];

interface ContentProvider {
  provideTextDocumentContent(uri: Uri): string;
}

/** What the extension showed the user. */
export const shown = {
  info: [] as string[],
  warnings: [] as string[],
  errors: [] as string[],
  progress: [] as string[],
  output: [] as string[],
  documents: [] as string[],
  /** The language of each document shown (as `documents`). */
  languages: [] as string[],
  /** Modal dialogs asked (their message). */
  modals: [] as string[],
  /** The detail text of each modal dialog. */
  modalDetails: [] as string[],
  /** The placeholder of each quick pick. */
  quickPicks: [] as string[],
};

type Shown = keyof typeof shown;
const changed = new EventEmitter<void>();

function show(kind: Shown, text: string): void {
  shown[kind].push(text);
  changed.fire();
}

/** Resolves once `predicate` holds, checked whenever the extension shows something. */
export function when(predicate: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    if (predicate()) return resolve();
    const listener = changed.event(() => {
      if (predicate()) {
        listener.dispose();
        resolve();
      }
    });
  });
}

/** The user's answers, set by the tests; each is called when the extension asks. */
export const ui = {
  inputBox: (): string | undefined => undefined,
  quickPick: <T>(items: T[]): T | undefined => items[0],
  modal: (_message: string, ...buttons: string[]): string | undefined | Promise<string | undefined> =>
    buttons[0],
  /** The button picked on a non-modal information message that offers some. */
  info: (_message: string, ..._items: string[]): string | undefined => undefined,
  /** Called with a function that cancels the run's progress notification. */
  progressStarted: (_cancel: () => void): void => undefined,
};

export const settings: Record<string, unknown> = {};
export const commands = new Map<string, (...args: unknown[]) => unknown>();
const providers = new Map<string, ContentProvider>();
const configurationChanged = new EventEmitter<{ affectsConfiguration(section: string): boolean }>();

/** Tell the extension that the setting `section` changed (as VS Code: its parents are affected too). */
export function changeConfiguration(section: string): void {
  configurationChanged.fire({
    affectsConfiguration: (name: string) => name === section || section.startsWith(`${name}.`),
  });
}
let workspaceFolders: { uri: Uri; name: string; index: number }[] = [];

export function setWorkspace(path: string): void {
  workspaceFolders = [{ uri: Uri.file(path), name: "project", index: 0 }];
}

export function outputText(): string {
  return shown.output.join("");
}

const disposable = { dispose: () => undefined };

/** Webview view providers by view id (the chat view). */
export const webviewProviders = new Map<string, unknown>();

/** The status bar items the extension made: their text as the user sees it. */
interface StatusBarItem {
  text: string;
  tooltip?: string;
  command?: string;
  shown: boolean;
}
export const statusBarItems: StatusBarItem[] = [];

/** What the extension put on the clipboard, in order. */
export const clipboard: string[] = [];

export const vscode = {
  env: {
    clipboard: {
      writeText: async (text: string) => {
        clipboard.push(text);
      },
      readText: async () => clipboard.at(-1) ?? "",
    },
  },
  EventEmitter,
  Uri,
  Position,
  Range,
  WorkspaceEdit,
  StatusBarAlignment: { Left: 1, Right: 2 },
  ProgressLocation: { SourceControl: 1, Window: 10, Notification: 15 },
  commands: {
    registerCommand(id: string, handler: (...args: unknown[]) => unknown) {
      if (commands.has(id)) throw new Error(`command ${id} registered twice`);
      commands.set(id, handler);
      return { dispose: () => commands.delete(id) };
    },
    async executeCommand(id: string, ...args: unknown[]) {
      const handler = commands.get(id);
      if (!handler) throw new Error(`command '${id}' not found`);
      return handler(...args);
    },
  },
  window: {
    activeTextEditor: undefined as unknown,
    visibleTextEditors: [],
    registerWebviewViewProvider(id: string, provider: unknown) {
      webviewProviders.set(id, provider);
      return { dispose: () => webviewProviders.delete(id) };
    },
    createStatusBarItem: () => {
      const item: StatusBarItem = { text: "", shown: false };
      statusBarItems.push(item);
      return {
        get text() {
          return item.text;
        },
        set text(value: string) {
          item.text = value;
        },
        set tooltip(value: string | undefined) {
          item.tooltip = value;
        },
        set command(value: string | undefined) {
          item.command = value;
        },
        show: () => (item.shown = true),
        hide: () => (item.shown = false),
        dispose: () => undefined,
      };
    },
    createOutputChannel: (_name: string) => ({
      append: (text: string) => show("output", text),
      appendLine: (text: string) => show("output", `${text}\n`),
      show: () => undefined,
      dispose: () => undefined,
    }),
    showInformationMessage: async (message: string, ...items: string[]) => {
      show("info", message);
      return ui.info(message, ...items);
    },
    showErrorMessage: async (message: string) => show("errors", message),
    showWarningMessage: async (message: string, ...rest: unknown[]) => {
      const options = rest[0];
      if (typeof options === "object" && options !== null && (options as { modal?: boolean }).modal) {
        show("modals", message);
        show("modalDetails", (options as { detail?: string }).detail ?? "");
        // Items are strings or MessageItems ({title}); the user picks by label.
        const items = rest.slice(1) as (string | { title: string })[];
        const label = (item: string | { title: string }) => (typeof item === "string" ? item : item.title);
        const picked = await ui.modal(message, ...items.map(label));
        return items.find((item) => label(item) === picked);
      }
      show("warnings", message);
      return undefined;
    },
    showInputBox: async () => ui.inputBox(),
    showQuickPick: async <T>(items: T[] | Promise<T[]>, options?: { placeHolder?: string }) => {
      show("quickPicks", options?.placeHolder ?? "");
      return ui.quickPick(await items);
    },
    showTextDocument: async (document: { getText(): string; languageId?: string }) => {
      shown.languages.push(document.languageId ?? "markdown");
      show("documents", document.getText());
      return {};
    },
    async withProgress<R>(
      options: { cancellable?: boolean },
      task: (
        progress: { report(value: { message?: string }): void },
        token: { isCancellationRequested: boolean; onCancellationRequested: EventEmitter<void>["event"] },
      ) => Promise<R>,
    ): Promise<R> {
      const cancelled = new EventEmitter<void>();
      const token = { isCancellationRequested: false, onCancellationRequested: cancelled.event };
      if (options.cancellable) {
        ui.progressStarted(() => {
          token.isCancellationRequested = true;
          cancelled.fire();
        });
      }
      return task({ report: ({ message }) => message && show("progress", message) }, token);
    },
  },
  workspace: {
    get workspaceFolders() {
      return workspaceFolders;
    },
    getConfiguration: (section: string) => ({
      get: <T>(key: string, fallback?: T): T | undefined =>
        (settings[`${section}.${key}`] as T | undefined) ?? fallback,
    }),
    onDidChangeConfiguration: configurationChanged.event,
    textDocuments,
    async applyEdit(edit: WorkspaceEdit) {
      edits.push(edit);
      changed.fire();
      return true;
    },
    registerTextDocumentContentProvider(scheme: string, provider: ContentProvider) {
      providers.set(scheme, provider);
      return { dispose: () => providers.delete(scheme) };
    },
    async openTextDocument(target: Uri | { content?: string; language?: string }) {
      if (!(target instanceof Uri)) {
        const text = target.content ?? "";
        return { languageId: target.language ?? "plaintext", getText: () => text };
      }
      const uri = target;
      const provider = providers.get(uri.scheme);
      if (!provider) throw new Error(`no content provider for ${uri.scheme}`);
      const text = provider.provideTextDocumentContent(uri);
      return { uri, languageId: uri.path.endsWith(".diff") ? "diff" : undefined, getText: () => text };
    },
    asRelativePath: (uri: Uri) => {
      const root = workspaceFolders[0]?.uri.path;
      return root && uri.path.startsWith(`${root}/`) ? relative(root, uri.path) : uri.path;
    },
    /** Every file of the workspace folder (the glob is left to the caller's own filtering). */
    async findFiles(_include: string, _exclude?: string, max = Infinity) {
      const root = workspaceFolders[0]?.uri.path;
      if (!root) return [];
      const files = (readdirSync(root, { recursive: true, withFileTypes: true }) as { name: string; parentPath: string; isFile(): boolean }[])
        .filter((entry) => entry.isFile())
        .map((entry) => Uri.file(join(entry.parentPath, entry.name)));
      return files.slice(0, max);
    },
    fs: {
      readFile: async (uri: Uri) => new Uint8Array(readFileSync(uri.fsPath)),
      writeFile: async (uri: Uri, bytes: Uint8Array) => {
        mkdirSync(dirname(uri.fsPath), { recursive: true });
        writeFileSync(uri.fsPath, bytes);
        changed.fire();
      },
    },
  },
  Disposable: { from: () => disposable },
};

/** Make `require("vscode")` answer the stand-in, from now on. */
export function install(): void {
  const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const original = loader._load;
  loader._load = function (request: string, ...rest: unknown[]) {
    return request === "vscode" ? vscode : original.call(this, request, ...rest);
  };
}
