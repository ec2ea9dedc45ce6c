/**
 * The chat view: a webview in tether's own activity-bar container. This side owns the session,
 * the run in flight, the attached context and the permission questions; the webview
 * (src/webview/main.ts) draws what it is sent. Both speak the types of ./messages.
 */
import { randomBytes } from "node:crypto";

import * as vscode from "vscode";

import { applyTarget, writeTarget } from "./apply";
import { filesFrom, firstPrompt, proposal, shortTitle, summary, transcriptItems, type Proposal } from "./chat-model";
import {
  promptWithContext,
  type ContextItem,
  type FromWebview,
  type PermissionOutcome,
  type SessionMode,
  type SymbolMention,
  type ToWebview,
} from "./messages";
import { describe } from "./render";
import {
  conflictingPaths,
  errorCode,
  ErrorCodes,
  ResponseError,
  type Checkpoint,
  type Message,
  type PermissionParams,
  type ProgressParams,
  type RewindParams,
  type RewindResult,
  type RunHandle,
  type RunResult,
  type Session,
  type TetherConnection,
} from "./rpc";
import { symbolContext, workspaceSymbols } from "./symbols";

export const PROPOSAL_SCHEME = "tether-proposal";

/** What `@` never offers: dependencies, build output, version control. */
const MENTION_EXCLUDE = "{**/node_modules/**,**/.git/**,**/.venv/**,**/dist/**,**/out/**,**/__pycache__/**}";

/** What the chat view needs from the extension. */
export interface ChatHost {
  server(): Promise<TetherConnection>;
  /** The model a session's runs use, for the line under each answer. */
  model(session: Session | undefined): string | undefined;
  log(line: string): void;
  /** The view's current session changed (or was updated): its mode is shown outside the view. */
  sessionChanged?(session: Session | undefined): void;
  /** A turn of the view ended (the extension may restart the server it waited for). */
  turnEnded?(): void;
  /** The view left its session for good (a new one, deleted, or gone from the store). */
  sessionForgotten?(): void;
  /** Show a session's transcript in an editor (a sub-agent's, opened while the view runs). */
  showTranscript?(session: Session, messages: Message[]): Promise<void>;
  /** The session the view showed when VS Code last closed this workspace: resumed when it opens. */
  lastSessionId?: string;
}

interface Question {
  resolve(outcome: PermissionOutcome | undefined): void;
  title: string;
  proposal?: Proposal;
}

export class ChatView implements vscode.WebviewViewProvider, vscode.Disposable {
  static readonly viewType = "tether.chat";

  private view: vscode.WebviewView | undefined;
  private current: Session | undefined;
  /**
   * The session to resume on the next server: the one shown when the server stopped (a restart for
   * a setting, a crash) or when VS Code last closed the workspace.
   */
  private resumeId: string | undefined;
  private run: RunHandle | undefined;
  private context: ContextItem[] = [];
  /** The last prompt sent: Retry sends it again after a run that ended in an error. */
  private lastPrompt: { text: string; context: ContextItem[]; messageId?: string; failed: boolean } | undefined;
  /** The runs whose progress the view shows: its run's, and its sub-agents' (whose children it shows too). */
  private readonly runIds = new Set<string>();
  private readonly questions = new Map<string, Question>();
  private readonly documents = new Map<string, string>();
  private readonly documentChanged = new vscode.EventEmitter<vscode.Uri>();
  private nextQuestion = 1;
  private nextApply = 1;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly host: ChatHost,
  ) {
    this.resumeId = host.lastSessionId;
    this.disposables.push(
      this.documentChanged,
      vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, {
        onDidChange: this.documentChanged.event,
        provideTextDocumentContent: (uri) => this.documents.get(uri.path) ?? "",
      }),
    );
  }

  /** The session the view shows (undefined: the next prompt starts one). */
  get session(): Session | undefined {
    return this.current;
  }

  private set session(session: Session | undefined) {
    this.current = session;
    this.host.sessionChanged?.(session);
    this.postConfig();
  }

  /** The session's mode and model, for the picker beside the prompt (a session not made yet: `ask`). */
  private postConfig(): void {
    this.post({ type: "sessionConfig", mode: this.current?.mode ?? "ask", model: this.host.model(this.current) });
  }

  // -- the webview ---------------------------------------------------------------------------

  resolveWebviewView(view: vscode.WebviewView): void {
    this.view = view;
    const dist = vscode.Uri.joinPath(this.extensionUri, "dist");
    view.webview.options = { enableScripts: true, localResourceRoots: [dist] };
    view.webview.html = this.html(view.webview, dist);
    this.disposables.push(
      view.webview.onDidReceiveMessage((message: FromWebview) => void this.receive(message)),
      view.onDidDispose(() => {
        if (this.view === view) this.view = undefined;
      }),
    );
  }

  private html(webview: vscode.Webview, dist: vscode.Uri): string {
    const nonce = randomBytes(16).toString("base64");
    const script = webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.js"));
    const style = webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview-style.css"));
    const csp = [
      "default-src 'none'",
      `img-src ${webview.cspSource} data:`,
      `style-src ${webview.cspSource}`,
      `font-src ${webview.cspSource}`,
      `script-src 'nonce-${nonce}'`,
    ].join("; ");
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${style.toString()}">
<title>Tether</title>
</head>
<body>
<div id="app"></div>
<script nonce="${nonce}" src="${script.toString()}"></script>
</body>
</html>`;
  }

  private post(message: ToWebview): void {
    void this.view?.webview.postMessage(message);
  }

  /** An information line in the view (nothing when it is not shown). */
  notice(message: string): void {
    this.post({ type: "notice", level: "info", message });
  }

  /** Show the view (and create it if it never was). */
  async reveal(): Promise<void> {
    await vscode.commands.executeCommand(`${ChatView.viewType}.focus`);
  }

  private async receive(message: FromWebview): Promise<void> {
    try {
      switch (message.type) {
        case "ready":
          if (this.resumeId && !this.current) await this.resume();
          else await this.showCurrent();
          this.post({ type: "context", items: this.context });
          this.postConfig();
          break;
        case "send":
          await this.send(message.text);
          break;
        case "stop":
          await this.stop();
          break;
        case "attach":
          this.attach(message.what);
          break;
        case "detach":
          this.context.splice(message.index, 1);
          this.post({ type: "context", items: this.context });
          break;
        case "answer":
          this.questions.get(message.requestId)?.resolve(message.outcome);
          break;
        case "openDiff":
          await this.openDiff(message.requestId);
          break;
        case "newSession":
          await this.newSession();
          break;
        case "listSessions":
          await this.listSessions();
          break;
        case "switchSession":
          await this.switchSession(message.sessionId);
          break;
        case "forkSession":
          await this.forkSession(message.sessionId);
          break;
        case "deleteSession":
          await this.deleteSession(message.sessionId);
          break;
        case "restore":
          await this.restore(message.messageId);
          break;
        case "retry":
          await this.retry();
          break;
        case "commands":
          await this.commands();
          break;
        case "mentions":
          await this.mentions(message.query);
          break;
        case "attachFile":
          await this.attachFile(message.path);
          break;
        case "openSession":
          await this.openSession(message.sessionId);
          break;
        case "copy":
          await vscode.env.clipboard.writeText(message.text);
          break;
        case "insert":
          await this.insert(message.text);
          break;
        case "apply":
          await this.apply(message.text, message.path);
          break;
        case "attachSymbol":
          await this.attachSymbol(message.symbol);
          break;
        case "setMode":
          await this.setModeFromView(message.mode);
          break;
        case "pickModel":
          await vscode.commands.executeCommand("tether.pickModel");
          break;
        default:
          break;
      }
    } catch (error) {
      this.host.log(`[chat] ${message.type}: ${describe(error)}`);
      this.post({ type: "error", message: describe(error) });
    }
  }

  // -- runs ----------------------------------------------------------------------------------

  /** Whether progress and questions of this session belong to the view. */
  owns(sessionId: string): boolean {
    return this.view !== undefined && this.run?.sessionId === sessionId;
  }

  /** Whether a question belongs to the view: one of its run's, or of a sub-agent it shows. */
  asks(params: PermissionParams): boolean {
    return this.owns(params.sessionId) || (this.view !== undefined && this.runIds.has(params.runId));
  }

  get running(): boolean {
    return this.run !== undefined;
  }

  onProgress(params: ProgressParams): void {
    const { parentRunId, parentToolCallId } = params;
    if (parentRunId !== undefined && parentToolCallId !== undefined && this.runIds.has(parentRunId)) {
      // A sub-agent of the view's run (or of one of its sub-agents): shown under its `task` call.
      this.runIds.add(params.runId);
      const subagent = { sessionId: params.sessionId, runId: params.runId, parentRunId, parentToolCallId };
      this.post({ type: "progress", event: params.event, subagent });
      return;
    }
    if (!this.owns(params.sessionId)) return;
    this.runIds.add(params.runId);
    if (params.event.kind === "run_started" && this.lastPrompt) this.lastPrompt.messageId = params.event.userMessageId;
    this.post({ type: "progress", event: params.event });
  }

  /**
   * A sub-agent's Open: its session (`session/get` + `session/messages`) in the view; while a run is
   * going (the view stays on it), as a read-only transcript beside it.
   */
  async openSession(sessionId: string): Promise<void> {
    if (!this.run) {
      await this.switchSession(sessionId);
      return;
    }
    const connection = await this.host.server();
    const [session, messages] = await Promise.all([connection.getSession(sessionId), connection.allMessages(sessionId)]);
    if (!this.host.showTranscript) throw new Error("a run is going: open the sub-agent's session once it ends");
    await this.host.showTranscript(session, messages);
  }

  /** Put the keyboard focus in the prompt (after Send Selection to Chat). */
  focusPrompt(): void {
    this.post({ type: "focus" });
  }

  /**
   * Send a prompt (with the attached context) in the current session, creating one if needed. The
   * run's result (undefined: it failed, as the view then says).
   */
  async send(text: string): Promise<RunResult | undefined> {
    if (this.run) throw new Error("a run is already going: stop it first");
    const connection = await this.host.server();
    // After a restart the prompt goes on in the session the view shows, never silently elsewhere.
    if (this.resumeId && !this.current) await this.resume();
    let session = this.session ?? (await connection.createSession({}));
    if (!session.title && session.messageCount === 0) {
      session = await connection.configure({ sessionId: session.sessionId, title: shortTitle(text) });
    }
    this.session = session;
    const context = this.context;
    this.context = [];
    this.lastPrompt = { text, context, failed: false };
    this.post({ type: "context", items: [] });
    this.post({
      type: "turnStarted",
      prompt: text,
      context,
      sessionId: session.sessionId,
      title: summary(session, text).title,
    });
    this.host.log(`[chat] > ${text}`);
    this.runIds.clear();
    const run = connection.run({ sessionId: session.sessionId, prompt: promptWithContext(text, context) });
    this.run = run;
    try {
      const result = await run.result;
      this.post({
        type: "turnFinished",
        stopReason: result.stopReason,
        model: this.host.model(session),
        usage: result.usage,
      });
      return result;
    } catch (error) {
      if (this.lastPrompt) this.lastPrompt.failed = true;
      this.host.log(`[chat] ${describe(error)}`);
      this.post({ type: "turnFinished", stopReason: "error", model: this.host.model(session), error: describe(error) });
      return undefined;
    } finally {
      this.run = undefined;
      const updated = await connection.getSession(session.sessionId).catch(() => session);
      // Unless the user moved on meanwhile (New session, another session, a restart).
      if (this.current?.sessionId === session.sessionId) this.session = updated;
      this.host.turnEnded?.();
    }
  }

  /**
   * Retry: the prompt of the turn that ended in an error, sent again with its context. What that
   * turn stored (its prompt, a partial answer) is rewound first, so the conversation holds the
   * prompt once.
   */
  async retry(): Promise<void> {
    const last = this.lastPrompt;
    if (!last?.failed) throw new Error("nothing to retry: the last turn did not fail");
    const session = this.session;
    if (session && last.messageId) {
      const connection = await this.host.server();
      try {
        await connection.rewind({ sessionId: session.sessionId, messageId: last.messageId, files: false, history: true });
        this.session = await connection.getSession(session.sessionId);
      } catch (error) {
        this.host.log(`[chat] retry: the failed turn stays in the conversation (${describe(error)})`);
      }
    }
    await this.showCurrent();
    this.context = last.context;
    await this.send(last.text);
  }

  /**
   * The slash commands of the view's session, for `/` completion. The session is made now when the
   * view has none yet: the prompt being typed will run in it.
   */
  async commands(): Promise<void> {
    const connection = await this.host.server();
    if (this.resumeId && !this.current) await this.resume();
    this.session ??= await connection.createSession({});
    const commands = await connection.commands(this.session.sessionId);
    this.post({
      type: "commands",
      commands: commands.map(({ name, description, argumentHint }) => ({ name, description, argumentHint })),
    });
  }

  /** A code block's Insert: its text at the cursor of the editor, replacing the selection. */
  async insert(text: string): Promise<void> {
    const editor = vscode.window.activeTextEditor ?? vscode.window.visibleTextEditors[0];
    if (!editor) throw new Error("Open a file first: there is no editor to insert into.");
    await editor.edit((edit) => {
      for (const selection of editor.selections) edit.replace(selection, text);
    });
    await vscode.window.showTextDocument(editor.document, editor.viewColumn);
  }

  /**
   * A code block's Apply (the rule: ./apply): the change opens in VS Code's diff editor (current ↔
   * proposed, two read-only documents) and is written only once the user accepts it. Whether it was.
   */
  async apply(text: string, path?: string): Promise<boolean> {
    const target = await applyTarget(text, path);
    const id = `apply-${this.nextApply++}`;
    const current = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${id}/current/${target.path}` });
    const proposed = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${id}/proposed/${target.path}` });
    this.documents.set(current.path, target.before);
    this.documents.set(proposed.path, target.after);
    const what = target.range ? `the selection in ${target.path}` : target.created ? `a new file, ${target.path}` : target.path;
    try {
      const label = target.created ? "new file" : target.range ? "selection replaced" : "current ↔ proposed";
      await vscode.commands.executeCommand("vscode.diff", current, proposed, `${target.path} (${label}, Apply)`, { preview: true });
      const answer = await vscode.window.showInformationMessage(`Tether: apply the code block to ${what}?`, "Accept", "Discard");
      if (answer !== "Accept") {
        this.host.log(`[chat] apply to ${target.path}: discarded`);
        return false;
      }
      await writeTarget(target);
      this.host.log(`[chat] apply to ${target.path}: applied`);
      return true;
    } finally {
      await this.closeDiff(id);
      this.forget(id);
    }
  }

  /** The view's mode picker; the picker shows the session's mode again whether or not it changed. */
  private async setModeFromView(mode: SessionMode): Promise<void> {
    try {
      const session = await this.setMode(mode);
      this.host.log(`[chat] mode: ${session.mode ?? mode}`);
    } finally {
      this.postConfig();
    }
  }

  async stop(): Promise<boolean> {
    return (await this.run?.cancel()) ?? false;
  }

  /**
   * `session/configure {mode}` on the view's session (a new one when there is none yet): every
   * later run of the session, in any client, runs in that mode.
   */
  async setMode(mode: SessionMode): Promise<Session> {
    const connection = await this.host.server();
    if (this.resumeId && !this.current) await this.resume();
    const session = this.session ?? (await connection.createSession({}));
    this.session = await connection.configure({ sessionId: session.sessionId, mode });
    return this.session;
  }

  /**
   * `session/configure {model}` on the view's session (a new one when there is none yet): its later
   * runs use that model; `null` goes back to the configured provider's.
   */
  async setModel(model: string | null): Promise<Session> {
    const connection = await this.host.server();
    if (this.resumeId && !this.current) await this.resume();
    const session = this.session ?? (await connection.createSession({}));
    this.session = await connection.configure({ sessionId: session.sessionId, model });
    return this.session;
  }

  /** `tool/requestPermission` for a run of the view (or a sub-agent's): asked in the tool's card. */
  async askPermission(params: PermissionParams, token: vscode.CancellationToken): Promise<PermissionOutcome> {
    const requestId = `q${this.nextQuestion++}`;
    const { name, arguments: args } = params.toolCall;
    const title = params.toolCall.title ?? name;
    const change = params.diff ? proposal(params.diff) : undefined;
    const outcome = await new Promise<PermissionOutcome | undefined>((resolve) => {
      const withdrawn = token.onCancellationRequested(() => resolve(undefined));
      this.questions.set(requestId, {
        title,
        proposal: change,
        resolve: (value) => {
          withdrawn.dispose();
          resolve(value);
        },
      });
      this.post({
        type: "permission",
        requestId,
        // A sub-agent's question is asked in its box, where its calls are.
        subagentRunId: this.owns(params.sessionId) ? undefined : params.runId,
        toolCallId: params.toolCall.id,
        title,
        toolKind: name === "run_command" ? "execute" : "edit",
        reason: params.reason,
        file: change?.path,
        diff: change?.diff,
        command: name === "run_command" ? commandOf(args) : undefined,
      });
      // The question waits in the view: bring it up if it was collapsed or behind another view.
      if (this.view && !this.view.visible) this.view.show(true);
      if (change) void this.openDiff(requestId);
    });
    this.questions.delete(requestId);
    await this.closeDiff(requestId);
    this.forget(requestId);
    this.post({ type: "permissionClosed", requestId, outcome });
    this.host.log(`[permission] ${title}: ${outcome ?? "withdrawn by the server"}`);
    return outcome ?? "reject"; // a withdrawn question is answered -32800 by the connection
  }

  /** The proposed change side by side with the file as it is: two read-only virtual documents. */
  private async openDiff(requestId: string): Promise<void> {
    const change = this.questions.get(requestId)?.proposal;
    if (!change) return;
    const before = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${requestId}/current/${change.path}` });
    const after = vscode.Uri.from({ scheme: PROPOSAL_SCHEME, path: `/${requestId}/proposed/${change.path}` });
    this.documents.set(before.path, change.before);
    this.documents.set(after.path, change.after);
    const label = change.created ? "new file" : "current ↔ proposed";
    await vscode.commands.executeCommand("vscode.diff", before, after, `${change.path} (${label}, tether)`, {
      preview: true,
      preserveFocus: true,
    });
  }

  /** Close the proposal's diff editor once the question is answered: it shows a change that is over. */
  private async closeDiff(requestId: string): Promise<void> {
    const tabs = vscode.window.tabGroups?.all.flatMap((group) => group.tabs) ?? [];
    const ours = tabs.filter((tab) => {
      const input = tab.input;
      return (
        input instanceof vscode.TabInputTextDiff &&
        input.modified.scheme === PROPOSAL_SCHEME &&
        input.modified.path.startsWith(`/${requestId}/`)
      );
    });
    if (ours.length > 0) await vscode.window.tabGroups.close(ours, true);
  }

  private forget(requestId: string): void {
    for (const path of [...this.documents.keys()]) {
      if (path.startsWith(`/${requestId}/`)) this.documents.delete(path);
    }
  }

  // -- context -------------------------------------------------------------------------------

  attach(what: "selection" | "file", from?: vscode.TextEditor): void {
    const editor = from ?? vscode.window.activeTextEditor ?? vscode.window.visibleTextEditors[0];
    if (!editor) {
      this.post({ type: "error", message: "Open a file first: there is no editor to take context from." });
      return;
    }
    const document = editor.document;
    const file = vscode.workspace.asRelativePath(document.uri);
    if (what === "selection" && !editor.selection.isEmpty) {
      const first = editor.selection.start.line + 1;
      const last = editor.selection.end.line + 1;
      this.context.push({
        label: `${file}:${first}-${last}`,
        file,
        lines: [first, last],
        text: document.getText(editor.selection),
      });
    } else {
      this.context.push({ label: file, file, text: document.getText() });
    }
    this.post({ type: "context", items: this.context });
  }

  /**
   * Files of the workspace whose path contains `query` (at most 20, shortest first), and its
   * symbols whose name does (./symbols), for `@`.
   */
  async mentions(query: string): Promise<void> {
    const pattern = query ? `**/*${query.replace(/[[\]{}*?!]/g, "")}*` : "**/*";
    const [found, symbols] = await Promise.all([
      vscode.workspace.findFiles(pattern, MENTION_EXCLUDE, 200),
      workspaceSymbols(query),
    ]);
    const needle = query.toLowerCase();
    const files = found
      .map((uri) => vscode.workspace.asRelativePath(uri, false))
      .filter((path) => path.toLowerCase().includes(needle))
      .sort((a, b) => a.length - b.length || a.localeCompare(b))
      .slice(0, 20);
    this.post({ type: "mentions", query, files, symbols });
  }

  /** A symbol picked after `@`: the lines of its definition, as a chip, go with the next prompt. */
  async attachSymbol(symbol: SymbolMention): Promise<void> {
    this.context.push(await symbolContext(symbol));
    this.post({ type: "context", items: this.context });
  }

  /** A file picked after `@`: its text, as a chip, goes with the next prompt. */
  async attachFile(path: string): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    if (!folder) throw new Error("Open a folder first: files are attached from the workspace.");
    const bytes = await vscode.workspace.fs.readFile(vscode.Uri.joinPath(folder, path));
    this.context.push({ label: path, file: path, text: new TextDecoder().decode(bytes) });
    this.post({ type: "context", items: this.context });
  }

  // -- sessions ------------------------------------------------------------------------------

  private async showCurrent(): Promise<void> {
    const session = this.session;
    if (!session) {
      this.post({ type: "session", items: [], running: false });
      return;
    }
    const connection = await this.host.server();
    const [messages, current, checkpoints] = await Promise.all([
      connection.allMessages(session.sessionId),
      connection.getSession(session.sessionId), // its plan as it is now
      checkpointsOf(connection, session.sessionId),
    ]);
    const model = this.host.model(session);
    this.post({
      type: "session",
      sessionId: session.sessionId,
      title: summary(session, firstPrompt(messages)).title,
      items: transcriptItems(messages, checkpoints).map((item) => (item.type === "runEnd" && model ? { ...item, model } : item)),
      running: this.run !== undefined,
      plan: current.plan,
    });
  }

  async newSession(): Promise<void> {
    if (this.run) throw new Error("a run is going: stop it before starting another session");
    this.session = undefined;
    this.resumeId = undefined;
    this.host.sessionForgotten?.();
    await this.showCurrent();
  }

  async listSessions(): Promise<void> {
    const connection = await this.host.server();
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri.toString();
    const { sessions } = await connection.listSessions({ workspace: folder, limit: 50 });
    const summaries = await Promise.all(
      sessions.map(async (session) => {
        if (session.title || session.messageCount === 0) return summary(session);
        const page = await connection.messages({ sessionId: session.sessionId, limit: 5 }).catch(() => undefined);
        return summary(session, page ? firstPrompt(page.messages) : undefined);
      }),
    );
    this.post({ type: "sessions", sessions: summaries, currentId: this.session?.sessionId });
  }

  async switchSession(sessionId: string): Promise<void> {
    if (this.run) throw new Error("a run is going: stop it before switching sessions");
    const connection = await this.host.server();
    this.session = await connection.getSession(sessionId);
    await this.showCurrent();
  }

  /** Tether: New Session: a session made now (`session/create`) and shown in the view. */
  async startSession(): Promise<Session> {
    if (this.run) throw new Error("a run is going: stop it before starting another session");
    const connection = await this.host.server();
    this.resumeId = undefined;
    const session = await connection.createSession({});
    this.session = session;
    await this.showCurrent();
    return session;
  }

  async forkSession(sessionId: string): Promise<Session> {
    if (this.run) throw new Error("a run is going: stop it before forking");
    const connection = await this.host.server();
    const source = await connection.getSession(sessionId);
    const messages = source.title ? [] : await connection.allMessages(sessionId);
    const title = `${summary(source, firstPrompt(messages)).title} (fork)`;
    const fork = await connection.fork({ sessionId, title });
    this.session = fork;
    await this.showCurrent();
    await this.listSessions();
    return fork;
  }

  async deleteSession(sessionId: string): Promise<void> {
    if (this.run?.sessionId === sessionId) throw new Error("this session is running: stop it first");
    const connection = await this.host.server();
    const session = await connection.getSession(sessionId);
    const messages = session.title ? [] : await connection.allMessages(sessionId);
    const title = summary(session, firstPrompt(messages)).title;
    const confirmed = await vscode.window.showWarningMessage(
      `Delete the session "${title}"?`,
      { modal: true, detail: `Its ${session.messageCount} messages are deleted for good, in every client of the store.` },
      "Delete",
    );
    if (confirmed !== "Delete") return;
    await connection.deleteSession(sessionId);
    if (this.session?.sessionId === sessionId) {
      this.session = undefined;
      this.host.sessionForgotten?.();
      await this.showCurrent();
    }
    await this.listSessions();
  }

  // -- checkpoints ---------------------------------------------------------------------------

  /**
   * The Restore action of a prompt: back to before its turn — the files (its turn's and the later
   * turns' changes undone), the conversation (that prompt and every later message removed), or
   * both. The pick lists the files it will change; a file changed outside tether since tether
   * wrote it is overwritten only after "Overwrite". A rewound conversation is drawn again from
   * session/messages.
   */
  async restore(messageId: string): Promise<RewindResult | undefined> {
    if (this.run) throw new Error("a run is going: stop it before restoring");
    const session = this.session;
    if (!session) return undefined;
    const connection = await this.host.server();
    const files = filesFrom(await connection.checkpoints(session.sessionId), messageId);
    const choice = await vscode.window.showQuickPick(restoreChoices(files), {
      title: "Restore to before this prompt",
      placeHolder: files.length > 0 ? `Files it will change: ${files.join(", ")}` : "No files to restore",
    });
    if (!choice) return undefined;
    const params: RewindParams = { sessionId: session.sessionId, messageId, files: choice.files, history: choice.history };
    const result = await this.rewind(connection, params);
    if (!result) return undefined;
    this.host.log(`[chat] restored ${describeRewind(result)}`);
    void vscode.window.showInformationMessage(`Tether: ${describeRewind(result)}.`);
    if (choice.history) {
      this.session = await connection.getSession(session.sessionId);
      await this.showCurrent();
    }
    return result;
  }

  /** `session/rewind`, asking before it overwrites files changed outside tether. */
  private async rewind(connection: TetherConnection, params: RewindParams): Promise<RewindResult | undefined> {
    try {
      return await connection.rewind(params);
    } catch (error) {
      const paths = conflictingPaths(error);
      if (!paths || params.force) throw error;
      const overwrite = await vscode.window.showWarningMessage(
        `Changed since tether wrote them: ${paths.join(", ")}. Overwrite them with the restored versions?`,
        { modal: true },
        "Overwrite",
      );
      return overwrite === "Overwrite" ? connection.rewind({ ...params, force: true }) : undefined;
    }
  }

  /** The server went away: the view's session is resumed on the next one (`resume`). */
  serverStopped(): void {
    this.resumeId = this.current?.sessionId ?? this.resumeId;
    this.current = undefined;
    for (const question of this.questions.values()) question.resolve(undefined);
  }

  /**
   * Show the session the view had before the server stopped (or VS Code closed), read again from
   * the server (`session/get` + `session/messages`). A session the server no longer has (an
   * in-memory store, a deleted session) is said so in the view, whose next prompt then starts a new
   * session. Whether it was resumed. `announce`: what the view says once it shows it again.
   */
  async resume(announce?: string): Promise<boolean> {
    const sessionId = this.resumeId;
    if (!sessionId) return this.current !== undefined;
    const connection = await this.host.server();
    try {
      this.session = await connection.getSession(sessionId);
    } catch (error) {
      if (errorCode(error) !== ErrorCodes.SessionNotFound) throw error;
      this.resumeId = undefined;
      this.host.sessionForgotten?.();
      const durable = connection.initializeResult?.capabilities.sessions?.durable === true;
      const why = durable
        ? "the session store no longer has it (deleted, or expired)"
        : "the server keeps sessions in memory (setting tether.sessions.store), so they end with it";
      this.host.log(`[chat] session ${sessionId} could not be resumed: ${why}`);
      this.post({
        type: "notice",
        level: "warning",
        message: `This conversation could not be resumed: ${why}. The next prompt starts a new session.`,
      });
      return false;
    }
    this.resumeId = undefined;
    this.host.log(`[chat] resumed session ${sessionId}`);
    await this.showCurrent();
    if (announce) this.post({ type: "notice", level: "info", message: announce });
    return true;
  }

  dispose(): void {
    for (const question of this.questions.values()) question.resolve(undefined);
    for (const item of this.disposables) item.dispose();
  }
}

interface RestoreChoice extends vscode.QuickPickItem {
  files: boolean;
  history: boolean;
}

/** Files, conversation or both; without files to restore, only the conversation. */
function restoreChoices(files: string[]): RestoreChoice[] {
  const conversation: RestoreChoice = {
    label: "Conversation",
    description: "remove this prompt and every later message",
    files: false,
    history: true,
  };
  if (files.length === 0) return [conversation];
  const detail = files.join(", ");
  return [
    { label: "Files", description: `put back ${files.length} file${files.length === 1 ? "" : "s"}`, detail, files: true, history: false },
    conversation,
    { label: "Files and conversation", description: "both", detail, files: true, history: true },
  ];
}

function describeRewind(result: RewindResult): string {
  const parts: string[] = [];
  if (result.restored.length > 0) parts.push(`restored ${result.restored.join(", ")}`);
  if (result.removed.length > 0) parts.push(`removed ${result.removed.join(", ")}`);
  if (result.messagesRemoved > 0) parts.push(`${result.messagesRemoved} messages removed`);
  return parts.length > 0 ? parts.join("; ") : "nothing to restore";
}

/** The session's checkpoints; none from a server that does not keep them. */
async function checkpointsOf(connection: TetherConnection, sessionId: string): Promise<Checkpoint[]> {
  try {
    return await connection.checkpoints(sessionId);
  } catch (error) {
    if (error instanceof ResponseError && error.code === ErrorCodes.MethodNotFound) return [];
    throw error;
  }
}

function commandOf(argumentsText: string): string | undefined {
  try {
    const args = JSON.parse(argumentsText) as { command?: unknown };
    if (Array.isArray(args.command)) return args.command.map(String).join(" ");
    return typeof args.command === "string" ? args.command : undefined;
  } catch {
    return undefined;
  }
}
