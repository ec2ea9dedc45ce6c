import * as vscode from "vscode";
import { firstPrompt, summary } from "./chat-model";
import { ChatView } from "./chatView";
import { MODES } from "./messages";
import { relativeTime } from "./relative-time";
import { describe, diffFile, kindMarker, permissionDetail, transcript } from "./render";
import {
  defaultCommand,
  ErrorCodes,
  TetherConnection,
  errorCode,
  type Message,
  type PermissionOutcome,
  type PermissionParams,
  type ProgressParams,
  type RunResult,
  type Session,
  type SessionMode,
} from "./rpc";

const TRANSCRIPT_SCHEME = "tether-transcript";
const MAX_RESTARTS = 3;

/**
 * The settings the server reads only when it starts (its command line, its session store): a change
 * restarts it, and the chat view resumes its session on the new one.
 */
const RESTART_SETTINGS = ["tether.serverCommand", "tether.sessions.store"];
/**
 * The settings a running server takes (`workspace/didChangeConfiguration`, docs/protocol.md): a
 * change is sent to it; the turn in progress keeps the ones it began with, the next turn uses them.
 */
const LIVE_SETTINGS = ["tether.provider", "tether.approval"];
/** What the chat view says once changed settings went to the running server. */
const SETTINGS_SENT = "Settings changed: the next turn uses them; this conversation goes on.";
/** The workspace state key of the chat view's session, resumed when VS Code opens the workspace again. */
const CHAT_SESSION_KEY = "tether.chatSession";

/** The permission dialog's answers besides its close button (Reject). */
const DIALOG_ANSWERS: { title: string; outcome: PermissionOutcome }[] = [
  { title: "Allow", outcome: "allow" },
  { title: "Always allow", outcome: "allow_always" },
  { title: "Always reject", outcome: "reject_always" },
];

class TetherExtension implements vscode.Disposable {
  private readonly output = vscode.window.createOutputChannel("Tether");
  private readonly transcripts = new Map<string, string>();
  private readonly transcriptChanged = new vscode.EventEmitter<vscode.Uri>();
  private connection: Promise<TetherConnection> | undefined;
  /** The server in use; the exit of one replaced already (a restart for a setting) changes nothing. */
  private live: TetherConnection | undefined;
  private restarts = 0;
  /** A setting that needs a restart changed while the chat view ran a turn: restart once it ends. */
  private restartPending = false;
  private disposed = false;
  private diffs = 0;
  /** "sessionId toolCallId" → what log lines call it (its title, with the kind marker), for every run. */
  private readonly toolLabels = new Map<string, string>();
  private chat: ChatView | undefined;
  /** The chat session's mode; a click picks another. */
  private readonly modeItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);

  register(context: vscode.ExtensionContext): void {
    this.chat = new ChatView(context.extensionUri, {
      server: () => this.server(),
      model: (session) => this.model(session),
      log: (line) => this.output.appendLine(line),
      sessionChanged: (session) => {
        this.showMode(session);
        if (session) void context.workspaceState?.update(CHAT_SESSION_KEY, session.sessionId);
      },
      turnEnded: () => {
        if (!this.restartPending) return;
        this.restartPending = false;
        void this.restartForSettings();
      },
      sessionForgotten: () => void context.workspaceState?.update(CHAT_SESSION_KEY, undefined),
      showTranscript: (session, messages) => this.showTranscript(session, messages),
      lastSessionId: context.workspaceState?.get<string>(CHAT_SESSION_KEY),
    });
    this.modeItem.command = "tether.pickMode";
    this.showMode(undefined);
    this.modeItem.show();
    context.subscriptions.push(
      this.chat,
      vscode.window.registerWebviewViewProvider(ChatView.viewType, this.chat, {
        webviewOptions: { retainContextWhenHidden: true },
      }),
    );
    const command = (id: string, handler: () => unknown): void => {
      context.subscriptions.push(vscode.commands.registerCommand(id, handler));
    };
    command("tether.newSession", () => this.newSession());
    command("tether.ask", () => this.ask());
    command("tether.cancel", () => this.cancel());
    command("tether.sendSelection", () => this.sendSelection());
    command("tether.showSessions", () => this.showSessions());
    command("tether.forkSession", () => this.forkSession());
    command("tether.openChat", async () => {
      await this.chat?.reveal();
      this.chat?.focusPrompt();
    });
    command("tether.pickMode", () => this.pickMode());
    command("tether.pickModel", () => this.pickModel());
    context.subscriptions.push(
      this.output,
      this.modeItem,
      this.transcriptChanged,
      vscode.workspace.registerTextDocumentContentProvider(TRANSCRIPT_SCHEME, {
        onDidChange: this.transcriptChanged.event,
        provideTextDocumentContent: (uri) => this.transcripts.get(uri.path) ?? "",
      }),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (RESTART_SETTINGS.some((name) => event.affectsConfiguration(name))) void this.restartForSettings();
        else if (LIVE_SETTINGS.some((name) => event.affectsConfiguration(name))) void this.sendSettings();
      }),
      this,
    );
  }

  // -- the server ------------------------------------------------------------------------

  private server(): Promise<TetherConnection> {
    this.connection ??= this.startServer().catch((error: unknown) => {
      this.connection = undefined;
      throw error;
    });
    return this.connection;
  }

  private async startServer(): Promise<TetherConnection> {
    const config = vscode.workspace.getConfiguration("tether");
    const configured = config.get<string[]>("serverCommand") ?? [];
    const python = vscode.workspace.getConfiguration("python").get<string>("defaultInterpreterPath");
    const command = configured.length > 0 ? configured : defaultCommand(python || undefined);
    const initializationOptions = settingsLayer();
    const folders = vscode.workspace.workspaceFolders ?? [];
    this.output.appendLine(`[tether] starting ${command.join(" ")}`);
    const connection = await TetherConnection.start({
      command,
      cwd: folders[0]?.uri.fsPath,
      workspaceFolders: folders.map((folder) => folder.uri.toString()),
      initializationOptions,
      // Always: the server asks only while `tether.approval` is "ask", which may change live.
      onPermission: (params, token) =>
        this.chat?.asks(params) ? this.chat.askPermission(params, token) : this.askPermission(params, token),
      onStderr: (text) => this.output.append(text),
    });
    connection.onProgress((params) => {
      this.progress(params);
      this.chat?.onProgress(params);
    });
    connection.onExit((info) => {
      if (this.live !== connection) return;
      this.live = undefined;
      this.connection = undefined;
      this.chat?.serverStopped();
      if (info.expected || this.disposed) return;
      const why = info.signal ? `signal ${info.signal}` : `exit code ${String(info.code)}`;
      this.output.appendLine(`[tether] the server stopped unexpectedly (${why})`);
      if (this.restarts >= MAX_RESTARTS) {
        void vscode.window.showErrorMessage(
          `Tether: the server stopped unexpectedly (${why}). It will start again with the next command.`,
        );
        return;
      }
      this.restarts += 1;
      const durable = connection.initializeResult?.capabilities.sessions?.durable === true;
      void vscode.window.showErrorMessage(
        `Tether: the server stopped unexpectedly (${why}); restarting it.` +
          (durable ? "" : " The sessions it held are gone (they were kept in memory)."),
      );
      this.server().then(
        () => {
          this.output.appendLine("[tether] the server is running again");
          void this.chat?.resume("The server restarted after it stopped: this conversation goes on.");
        },
        (error: unknown) => this.output.appendLine(`[tether] restart failed: ${describe(error)}`),
      );
    });
    this.live = connection;
    const info = connection.initializeResult?.serverInfo;
    this.output.appendLine(
      `[tether] ${info?.name ?? "tether"} ${info?.version ?? ""} ready (pid ${String(connection.process.pid)})`,
    );
    return connection;
  }

  /**
   * A setting the server reads at start changed: stop it, start it again with the new settings and
   * resume the chat view's session there (or say in the view why it cannot be). A turn in flight
   * finishes first.
   */
  private async restartForSettings(): Promise<void> {
    if (this.chat?.running) {
      this.restartPending = true;
      this.output.appendLine("[tether] settings changed: the server restarts when this turn ends");
      return;
    }
    const wasRunning = this.connection !== undefined;
    // First, so that a prompt sent while the old server stops resumes the session on the new one.
    this.chat?.serverStopped();
    await this.stopServer();
    if (!wasRunning || this.disposed) return;
    this.output.appendLine("[tether] settings changed: restarting the server");
    await this.guard(async () => {
      await this.server();
      await this.chat?.resume("The server restarted with the new settings: this conversation goes on.");
    });
  }

  /**
   * A setting the running server takes changed: send all of them (they replace the layer
   * `initializationOptions` set). No server yet: the one started next reads them.
   */
  private async sendSettings(): Promise<void> {
    const connection = this.live ?? (await this.connection?.catch(() => undefined));
    if (!connection?.running) return;
    try {
      await connection.changeSettings(settingsLayer());
    } catch (error) {
      this.output.appendLine(`[tether] could not send the settings: ${describe(error)}`);
      return;
    }
    this.output.appendLine("[tether] settings changed: sent to the server, the next turn uses them");
    this.chat?.notice(SETTINGS_SENT);
  }

  private async stopServer(): Promise<void> {
    const pending = this.connection;
    this.connection = undefined;
    this.live = undefined;
    if (pending) await (await pending.catch(() => undefined))?.shutdown();
  }

  private async askPermission(
    params: PermissionParams,
    token: vscode.CancellationToken,
  ): Promise<PermissionOutcome> {
    const name = params.toolCall.title ?? params.toolCall.name;
    const withdrawn = (): PermissionOutcome => {
      this.output.appendLine(`[permission] ${name}: withdrawn by the server (the run ended)`);
      return "reject"; // not sent: the connection answers a withdrawn request -32800
    };
    if (token.isCancellationRequested) return withdrawn();
    // A modal cannot be closed from here: once the question is withdrawn, stop waiting for it
    // and ignore whatever the user picks later.
    let listener: vscode.Disposable | undefined;
    const cancelled = new Promise<null>((resolve) => {
      listener = token.onCancellationRequested(() => resolve(null));
    });
    const items: vscode.MessageItem[] = [
      ...DIALOG_ANSWERS.map(({ title }) => ({ title })),
      // The dialog's own close button: no separate "Cancel" beside "Reject".
      { title: "Reject", isCloseAffordance: true },
    ];
    const choice = await Promise.race([
      vscode.window.showWarningMessage(`Tether wants to: ${name}`, { modal: true, detail: permissionDetail(params) }, ...items),
      cancelled,
    ]).finally(() => listener?.dispose());
    if (choice === null || token.isCancellationRequested) return withdrawn();
    const outcome: PermissionOutcome =
      DIALOG_ANSWERS.find(({ title }) => title === choice?.title)?.outcome ?? "reject";
    this.output.appendLine(`[permission] ${name}: ${outcome}`);
    return outcome;
  }

  // -- commands --------------------------------------------------------------------------

  /** Tether: New Session: a new session in the chat view. */
  async newSession(): Promise<Session | undefined> {
    const chat = this.chat;
    if (!chat) return undefined;
    return this.guard(async () => {
      const session = await chat.startSession();
      void vscode.window.showInformationMessage(`Tether: new session ${session.sessionId}`);
      return session;
    });
  }

  /**
   * Tether: Ask: a question, with the editor's selection as context, sent into the chat view (the
   * one place conversations happen), which is brought up for it.
   */
  async ask(): Promise<RunResult | undefined> {
    const chat = this.chat;
    if (!chat) return undefined;
    if (chat.running) {
      void vscode.window.showWarningMessage("Tether: a run is already going (Tether: Cancel stops it).");
      return undefined;
    }
    const editor = vscode.window.activeTextEditor;
    const question = await vscode.window.showInputBox({
      title: "Tether: Ask",
      prompt: "What should tether do?",
      ignoreFocusOut: true,
    });
    if (!question) return undefined;
    return this.guard(async () => {
      await chat.reveal();
      if (editor && !editor.selection.isEmpty) chat.attach("selection", editor);
      return chat.send(question);
    });
  }

  /** Send Selection to Chat: the selection (else the whole file) becomes context of the next prompt. */
  async sendSelection(): Promise<void> {
    const chat = this.chat;
    const editor = vscode.window.activeTextEditor;
    if (!chat || !editor) {
      void vscode.window.showInformationMessage("Tether: open a file and select what to send.");
      return;
    }
    await chat.reveal();
    chat.attach("selection", editor);
    chat.focusPrompt();
  }

  /** The mode of the chat view's session in the status bar (a session not started yet: `ask`). */
  private showMode(session: Session | undefined): void {
    const mode = MODES.find((entry) => entry.mode === (session?.mode ?? "ask")) ?? MODES[0];
    this.modeItem.text = `$(shield) ${mode.label}`;
    this.modeItem.tooltip = `Tether mode: ${mode.detail}. Click to change it.`;
  }

  /** Tether: Set Mode: pick a mode for the chat view's session (`session/configure {mode}`). */
  async pickMode(): Promise<Session | undefined> {
    const chat = this.chat;
    if (!chat) return undefined;
    const current = chat.session?.mode ?? "ask";
    const picked = await vscode.window.showQuickPick(
      MODES.map((entry) => ({
        label: entry.label,
        description: entry.mode === current ? "current" : undefined,
        detail: entry.detail,
        mode: entry.mode,
      })),
      { placeHolder: "The mode of the chat session" },
    );
    if (!picked) return undefined;
    return this.guard(async () => {
      const session = await chat.setMode(picked.mode);
      this.output.appendLine(`[chat] mode: ${session.mode ?? picked.mode}`);
      return session;
    });
  }

  /**
   * Tether: Set Model: the model of the chat view's session (`session/configure {model}`), picked
   * among the session's allowed models and the configured one, or typed.
   */
  async pickModel(): Promise<Session | undefined> {
    const chat = this.chat;
    if (!chat) return undefined;
    const current = this.model(chat.session);
    const allowed = Array.isArray(chat.session?.allowedModels) ? (chat.session.allowedModels as unknown[]) : [];
    const configured = this.model(undefined);
    const known = [...new Set([current, configured, ...allowed].filter((m): m is string => typeof m === "string" && m !== ""))];
    const OTHER = "Another model…";
    const RESET = "The configured model";
    const items: vscode.QuickPickItem[] = [
      ...known.map((label) => ({ label, description: label === current ? "current" : undefined })),
      { label: OTHER, description: "type its name" },
    ];
    if (chat.session?.model) items.push({ label: RESET, description: configured ? `back to ${configured}` : undefined });
    const picked = await vscode.window.showQuickPick(items, { placeHolder: "The model of the chat session" });
    if (!picked) return undefined;
    let model: string | null | undefined = picked.label === RESET ? null : picked.label;
    if (picked.label === OTHER) {
      model = await vscode.window.showInputBox({ title: "Tether: Set Model", prompt: "The model's name, as the provider knows it" });
      if (!model) return undefined;
    }
    return this.guard(async () => {
      const session = await chat.setModel(model ?? null);
      this.output.appendLine(`[chat] model: ${this.model(session) ?? "the configured one"}`);
      return session;
    });
  }

  /** Tether: Cancel: stop the chat view's run. */
  async cancel(): Promise<boolean> {
    if (!this.chat?.running) {
      void vscode.window.showInformationMessage("Tether: no run is going.");
      return false;
    }
    return this.guard(() => this.chat?.stop() ?? Promise.resolve(false)).then((cancelled) => cancelled ?? false);
  }

  async showSessions(): Promise<Session | undefined> {
    return this.guard(async () => {
      const connection = await this.server();
      const picked = await this.pickSession(connection, "Open the transcript of a session");
      if (!picked) return undefined;
      await this.showTranscript(picked, await connection.allMessages(picked.sessionId));
      // The picked session becomes the chat's (unless a turn runs there now).
      if (!this.chat?.running) await this.chat?.switchSession(picked.sessionId);
      return picked;
    });
  }

  /** A session and its messages as a read-only Markdown document. */
  private async showTranscript(session: Session, messages: Message[]): Promise<void> {
    const path = `/${session.sessionId}.md`;
    this.transcripts.set(path, transcript(session, messages));
    const uri = vscode.Uri.parse(`${TRANSCRIPT_SCHEME}:${path}`);
    this.transcriptChanged.fire(uri);
    const document = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(document, { preview: true });
  }

  async forkSession(): Promise<Session | undefined> {
    return this.guard(async () => {
      const connection = await this.server();
      const chat = this.chat;
      if (!chat) return undefined;
      const source = chat.session ?? (await this.pickSession(connection, "Fork which session?"));
      if (!source) return undefined;
      let fork: Session;
      try {
        fork = await chat.forkSession(source.sessionId);
      } catch (error) {
        if (errorCode(error) !== ErrorCodes.MethodNotFound) throw error;
        void vscode.window.showWarningMessage("Tether: this server cannot fork sessions yet.");
        return undefined;
      }
      void vscode.window.showInformationMessage(
        `Tether: forked ${source.sessionId} into ${fork.sessionId}`,
      );
      return fork;
    });
  }

  // -- helpers ---------------------------------------------------------------------------

  private async pickSession(
    connection: TetherConnection,
    placeHolder: string,
  ): Promise<Session | undefined> {
    const { sessions } = await connection.listSessions({ limit: 200 });
    if (sessions.length === 0) {
      void vscode.window.showInformationMessage("Tether: no sessions yet (Tether: New Session).");
      return undefined;
    }
    // Untitled sessions are named by their first prompt, never by their id.
    const titles = await Promise.all(
      sessions.map(async (session) => {
        if (session.title || session.messageCount === 0) return summary(session).title;
        const page = await connection.messages({ sessionId: session.sessionId, limit: 5 }).catch(() => undefined);
        return summary(session, page ? firstPrompt(page.messages) : undefined).title;
      }),
    );
    const item = await vscode.window.showQuickPick(
      sessions.map((session, index) => ({
        label: titles[index] ?? session.sessionId,
        description: `${session.messageCount} message(s)${session.running ? ", running" : ""}`,
        detail: `updated ${relativeTime(session.updatedAt)}${session.parentSessionId ? " · a fork" : ""}`,
        session,
      })),
      { placeHolder },
    );
    return item?.session;
  }

  private progress({ sessionId, event }: ProgressParams): void {
    switch (event.kind) {
      case "message_delta":
        this.output.append(event.text);
        break;
      case "tool_call": {
        const label = `${kindMarker(event.toolKind)}${event.title ?? event.name}`;
        this.toolLabels.set(`${sessionId} ${event.toolCallId}`, label);
        this.output.appendLine(`\n[tool] ${label} ${event.arguments}`);
        break;
      }
      case "tool_call_update": {
        const key = `${sessionId} ${event.toolCallId}`;
        const label = this.toolLabels.get(key) ?? event.toolCallId;
        if (event.status !== "in_progress") this.toolLabels.delete(key);
        if (event.status === "in_progress") {
          if (event.progress) {
            this.output.appendLine(`[tool] ${label}: ${event.progress}`);
          }
          break;
        }
        this.output.appendLine(`[tool] ${label}: ${event.status}${event.error ? ` (${event.error})` : ""}`);
        if (event.diff) {
          this.output.appendLine(event.diff.replace(/\n$/, ""));
          // The chat view shows the diff in the call's card; only other runs get the notification.
          if (!this.chat?.owns(sessionId)) void this.offerDiff(event.diff);
        }
        break;
      }
      case "warning":
      case "notice":
        this.output.appendLine(`\n[warning] ${event.message}`);
        break;
      default:
        break;
    }
  }

  /** Offer to open the diff of an edit, as a read-only virtual document (never an unsaved buffer). */
  private async offerDiff(diff: string): Promise<void> {
    const file = diffFile(diff) ?? "a file";
    const choice = await vscode.window.showInformationMessage(`Tether changed ${file}.`, "Open Diff");
    if (choice !== "Open Diff") return;
    this.diffs += 1;
    const path = `/changes/${this.diffs}/${file}.diff`;
    this.transcripts.set(path, diff);
    const uri = vscode.Uri.parse(`${TRANSCRIPT_SCHEME}:${path}`);
    this.transcriptChanged.fire(uri);
    const document = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(document, { preview: true });
  }

  /** The model runs of a session use: the session's, else the configured provider's. */
  private model(session: Session | undefined): string | undefined {
    const provider = vscode.workspace.getConfiguration("tether").get<Record<string, unknown>>("provider") ?? {};
    const configured = typeof provider.model === "string" ? provider.model : undefined;
    const type = typeof provider.type === "string" ? provider.type : undefined;
    return session?.model ?? configured ?? type;
  }

  /** Runs a command; an error becomes a message instead of a rejected command. */
  private async guard<T>(body: () => Promise<T>): Promise<T | undefined> {
    try {
      const result = await body();
      this.restarts = 0; // the server works again: crashes from here on count anew
      return result;
    } catch (error) {
      this.output.appendLine(`[error] ${describe(error)}`);
      void vscode.window.showErrorMessage(`Tether: ${describe(error)}`);
      return undefined;
    }
  }

  dispose(): void {
    this.disposed = true;
    void this.stopServer();
  }

  async stop(): Promise<void> {
    this.disposed = true;
    await this.stopServer();
  }
}

let extension: TetherExtension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  extension = new TetherExtension();
  extension.register(context);
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}

/** The client's layer of the server's configuration (`initializationOptions`), from the `tether.*` settings. */
function settingsLayer(): Record<string, unknown> {
  const config = vscode.workspace.getConfiguration("tether");
  const provider = config.get<Record<string, unknown>>("provider") ?? {};
  const approval = config.get<string>("approval") ?? "ask";
  const store = config.get<string>("sessions.store") ?? "sqlite";
  const layer: Record<string, unknown> = { tools: { approval } };
  if (Object.keys(provider).length > 0) layer.provider = provider;
  // Empty: the store tether's own configuration names (config.toml, TETHER_SESSIONS_STORE).
  if (store.trim()) layer.sessions = { store: store.trim() };
  return layer;
}
