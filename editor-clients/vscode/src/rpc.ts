/**
 * The tether wire protocol (docs/protocol.md) over a child process's stdio.
 *
 * This module does not import `vscode`: it runs, and is tested, under plain Node.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import {
  createMessageConnection,
  Emitter,
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
  type CancellationToken,
  type Disposable,
  type Event,
  type MessageConnection,
} from "vscode-jsonrpc/node";

export { ResponseError };

import type { PermissionOutcome, ProgressEvent, ProposedDiff, SessionMode, StopReason, Usage } from "./messages";
/** The wire's event and outcome types live in ./messages, shared with the chat view's webview. */
export type {
  PermissionOutcome,
  ProgressEvent,
  ProposedDiff,
  SessionMode,
  StopReason,
  ToolKind,
  Usage,
} from "./messages";

/** Error codes of docs/protocol.md that clients decide on. */
export const ErrorCodes = {
  MethodNotFound: -32601,
  InvalidParams: -32602,
  RequestCancelled: -32800,
  SessionNotFound: -32010,
  SessionBusy: -32011,
  ProviderError: -32012,
  ConfigError: -32013,
  WorkspaceError: -32014,
  StoreError: -32015,
} as const;

/** A slash command of `session/commands`. */
export interface SlashCommand {
  name: string;
  description: string;
  argumentHint?: string;
  source: "builtin" | "user" | "workspace";
}

export interface Session {
  sessionId: string;
  workspace: string;
  title?: string;
  model?: string;
  parentSessionId?: string;
  forkedFromMessageId?: string;
  messageCount: number;
  createdAt: string;
  updatedAt: string;
  running: boolean;
  plan?: { content: string; status: "pending" | "in_progress" | "completed"; priority?: "high" | "medium" | "low" }[];
  mode?: SessionMode;
  [key: string]: unknown;
}

export type ContentBlock =
  | { type: "text"; text: string }
  | { type: "image"; mimeType: string; data: string }
  | { type: "resource_link"; uri: string; name?: string };

export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface Message {
  id: string;
  role: "system" | "user" | "assistant" | "tool";
  content?: string | ContentBlock[];
  toolCalls?: ToolCall[];
  toolCallId?: string;
  isError?: boolean;
  runId?: string;
  /** Free-form; the server keeps what a replay needs here (`toolKinds`, `usage`, `cancelled`, `diff`). */
  metadata?: Record<string, unknown>;
  kind?: "compaction";
  createdAt: string;
  [key: string]: unknown;
}

export interface ToolCallRecord extends ToolCall {
  iteration: number;
  result: string;
  isError: boolean;
}

export interface RunResult {
  runId: string;
  sessionId: string;
  stopReason: StopReason;
  response: string;
  iterations: number;
  toolCalls: ToolCallRecord[];
  usage?: Usage;
}

/** What one turn changed in the workspace's files (`session/checkpoints`). */
export interface Checkpoint {
  checkpointId: string;
  /** The turn's prompt (`run_started.userMessageId`). */
  messageId: string;
  runId: string;
  createdAt: string;
  /** Workspace-relative, `/`-separated. */
  files: string[];
  skipped?: string[];
}

export interface RewindParams {
  sessionId: string;
  messageId: string;
  files?: boolean;
  history?: boolean;
  force?: boolean;
}

export interface RewindResult {
  restored: string[];
  removed: string[];
  messagesRemoved: number;
}

/** The paths a refused rewind names: files changed outside tether since it recorded them. */
export function conflictingPaths(error: unknown): string[] | undefined {
  if (!(error instanceof ResponseError) || error.code !== ErrorCodes.InvalidParams) return undefined;
  const data = error.data as { paths?: unknown } | undefined;
  return Array.isArray(data?.paths) ? data.paths.map(String) : undefined;
}

export interface ProgressParams {
  sessionId: string;
  runId: string;
  seq: number;
  event: ProgressEvent;
  /** A sub-agent's event: the run, and the `task` call of that run, that started it. */
  parentRunId?: string;
  parentToolCallId?: string;
}

export interface PermissionParams {
  sessionId: string;
  runId: string;
  /** `title`: what a person reads (`Write src/app.py`, `Run pytest -q`). */
  toolCall: ToolCall & { title?: string };
  /** Why a protected write is asked about even under `auto`. */
  reason?: string;
  /** An edit: the change it proposes, computed by the server before it asks. */
  diff?: ProposedDiff;
}

/**
 * Answers `tool/requestPermission`. `token` fires when the server withdraws the question
 * (`$/cancelRequest`, sent when the run is cancelled): the handler should stop asking then; the
 * server is answered -32800 whatever the handler returns afterwards.
 */
export type PermissionHandler = (
  params: PermissionParams,
  token: CancellationToken,
) => PermissionOutcome | Promise<PermissionOutcome>;

export interface InitializeResult {
  protocolVersion: number;
  serverInfo: { name: string; version?: string };
  capabilities: {
    sessions?: { store?: string; fork?: boolean; durable?: boolean };
    methods?: string[];
    providers?: string[];
    tools?: string[];
    progress?: boolean;
  };
}

export interface CreateSessionParams {
  workspace?: string;
  title?: string;
  agentId?: string;
  model?: string;
  systemPrompt?: string;
  settings?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  tools?: string[];
}

export interface RunParams {
  sessionId: string;
  prompt: string | ContentBlock[];
  maxIterations?: number;
  model?: string;
  tools?: string[];
}

/** A `kernel/run` in flight: its result, and what to cancel it with. */
export interface RunHandle {
  sessionId: string;
  result: Promise<RunResult>;
  /** Sends `kernel/cancel` for the run's session; the run then ends with `stopReason: "cancelled"`. */
  cancel(): Promise<boolean>;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** False when the server ended without being asked to (a crash). */
  expected: boolean;
}

export interface TetherOptions {
  /** The server's command line, e.g. `["python3", "-P", "-m", "tether", "serve"]`. */
  command?: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Workspace folders as `file://` URIs; the first is the default of `session/create`. */
  workspaceFolders?: string[];
  /** A configuration overlay (`{provider: {...}, tools: {approval}}`). */
  initializationOptions?: Record<string, unknown>;
  /** With a handler the client declares `capabilities.tether.permissions` and answers with it. */
  onPermission?: PermissionHandler;
  /** The server's stderr (its log), chunk by chunk. */
  onStderr?: (text: string) => void;
  clientName?: string;
}

export const DEFAULT_COMMAND: readonly string[] = ["python3", "-P", "-m", "tether", "serve"];

/**
 * The command when none is configured: `tether serve` when `tether` is on `path` (where
 * `uv tool install` and `pipx install` put it), else `python -P -m tether serve` with the
 * configured Python (`python3` by default).
 */
export function defaultCommand(python = "python3", path = process.env.PATH ?? ""): string[] {
  const onPath = path.split(delimiter).some((dir) => dir !== "" && isExecutable(join(dir, "tether")));
  return onPath ? ["tether", "serve"] : [python, ...DEFAULT_COMMAND.slice(1)];
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** vscode-jsonrpc's code for requests left unanswered when the connection closes. */
const PENDING_RESPONSE_REJECTED = -32097;
/** How much of the server's stderr a startup failure quotes. */
const STDERR_TAIL_CHARS = 2000;
/** How long a server that broke the connection during startup is given to report its exit. */
const STARTUP_EXIT_WAIT_MS = 3000;

export class TetherConnection implements Disposable {
  readonly process: ChildProcess;
  readonly connection: MessageConnection;
  initializeResult: InitializeResult | undefined;

  private readonly exitEmitter = new Emitter<ExitInfo>();
  private readonly progressEmitter = new Emitter<ProgressParams>();
  private stopping = false;
  private exitInfo: ExitInfo | undefined;
  /** Why the process could not be spawned (ENOENT, EACCES), if that is what happened. */
  private spawnError: Error | undefined;
  /** The end of the server's stderr: what a server that failed to start said about it. */
  private stderrTail = "";
  private readonly exited: Promise<ExitInfo>;

  /** Fires once when the server process ends; `expected: false` means it crashed. */
  readonly onExit: Event<ExitInfo> = this.exitEmitter.event;

  private constructor(private readonly options: TetherOptions) {
    const [program, ...args] = options.command ?? defaultCommand();
    if (program === undefined) throw new Error("tether: the server command is empty");
    this.process = spawn(program, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    const child = this.process;
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (text: string) => {
      this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL_CHARS);
      options.onStderr?.(text);
    });
    // A server that cannot be written to has gone away: 'exit' reports it.
    child.stdin?.on("error", () => undefined);
    this.exited = new Promise<ExitInfo>((resolve) => {
      const finish = (code: number | null, signal: NodeJS.Signals | null): void => {
        if (this.exitInfo) return;
        this.exitInfo = { code, signal, expected: this.stopping };
        this.connection.dispose(); // rejects the requests still waiting for an answer
        this.exitEmitter.fire(this.exitInfo);
        resolve(this.exitInfo);
      };
      child.on("exit", finish);
      child.on("error", (error) => {
        this.spawnError = error;
        options.onStderr?.(`tether: cannot start ${program}: ${error.message}\n`);
        finish(null, null);
      });
    });
    if (!child.stdout || !child.stdin) throw new Error("tether: no stdio pipes");
    this.connection = createMessageConnection(
      new StreamMessageReader(child.stdout),
      new StreamMessageWriter(child.stdin),
    );
    this.connection.onNotification("kernel/progress", (params: ProgressParams) =>
      this.progressEmitter.fire(params),
    );
    this.connection.onRequest(
      "tool/requestPermission",
      async (params: PermissionParams, token: CancellationToken) => {
        const handler = this.options.onPermission;
        if (!handler) {
          return new ResponseError(ErrorCodes.MethodNotFound, "this client answers no permission requests");
        }
        // Stop waiting as soon as the server withdraws the question, whatever the handler does.
        let withdrawn: Disposable | undefined;
        const cancelled = new Promise<undefined>((resolve) => {
          withdrawn = token.onCancellationRequested(() => resolve(undefined));
        });
        try {
          const outcome = await Promise.race([handler(params, token), cancelled]);
          if (outcome === undefined || token.isCancellationRequested) {
            return new ResponseError(ErrorCodes.RequestCancelled, "the permission request was withdrawn");
          }
          return { outcome };
        } finally {
          withdrawn?.dispose();
        }
      },
    );
    this.connection.listen();
  }

  /** Spawn the server and initialize it. A failed `initialize` stops the server and throws. */
  static async start(options: TetherOptions = {}): Promise<TetherConnection> {
    const tether = new TetherConnection(options);
    try {
      // No pid: the command could not be spawned at all ('error' follows); do not write to it.
      if (tether.process.pid === undefined) throw new Error("spawn failed");
      await tether.initialize();
    } catch (error) {
      // An error response is the server's own answer; anything else (vscode-jsonrpc's -32097
      // "Pending response rejected since connection got disposed") means it went away.
      const answered = error instanceof ResponseError && error.code !== PENDING_RESPONSE_REJECTED;
      const cause = answered ? undefined : await tether.startupFailure();
      tether.dispose();
      throw cause ?? error;
    }
    return tether;
  }

  /**
   * Why a server that did not answer `initialize` failed, in its own words: the spawn error, or
   * its exit status and the end of its stderr (`No module named tether`). Undefined when the
   * process is still running (a real protocol error then says more).
   */
  private async startupFailure(): Promise<Error | undefined> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const info = await Promise.race([
      this.exited,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), STARTUP_EXIT_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
    const command = (this.options.command ?? defaultCommand()).join(" ");
    if (this.spawnError) {
      return new Error(`cannot start the server command \`${command}\`: ${this.spawnError.message}`);
    }
    if (!info) return undefined;
    const status = info.signal ? `was killed by ${info.signal}` : `exited with code ${String(info.code)}`;
    const said = this.stderrTail.trim();
    return new Error(
      `the server command \`${command}\` ${status} before it answered initialize` +
        (said ? `:\n${said}` : " (it wrote nothing on stderr)"),
    );
  }

  private async initialize(): Promise<void> {
    const folders = this.options.workspaceFolders ?? [];
    const params: Record<string, unknown> = {
      processId: process.pid,
      clientInfo: { name: this.options.clientName ?? "tether-vscode" },
      protocolVersion: 1,
      capabilities: { tether: { permissions: this.options.onPermission !== undefined } },
    };
    if (folders.length > 0) params.workspaceFolders = folders.map((uri) => ({ uri }));
    if (this.options.initializationOptions) {
      params.initializationOptions = this.options.initializationOptions;
    }
    this.initializeResult = await this.request<InitializeResult>("initialize", params);
    await this.connection.sendNotification("initialized", {});
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  /** Any request; the result as plain JSON. Error responses reject with a `ResponseError`. */
  request<R>(method: string, params?: object): Promise<R> {
    if (this.exitInfo) return Promise.reject(new Error("tether: the server has stopped"));
    return params === undefined
      ? this.connection.sendRequest<R>(method)
      : this.connection.sendRequest<R>(method, params);
  }

  /** `workspace/didChangeConfiguration`: `settings` replace the layer `initializationOptions` set. */
  async changeSettings(settings: Record<string, unknown>): Promise<void> {
    if (this.exitInfo) return;
    await this.connection.sendNotification("workspace/didChangeConfiguration", { settings });
  }

  onProgress(handler: (params: ProgressParams) => void): Disposable {
    return this.progressEmitter.event(handler);
  }

  createSession(params: CreateSessionParams = {}): Promise<Session> {
    return this.request("session/create", params);
  }

  getSession(sessionId: string): Promise<Session> {
    return this.request("session/get", { sessionId });
  }

  listSessions(
    params: { workspace?: string; cursor?: string; limit?: number } = {},
  ): Promise<{ sessions: Session[]; nextCursor?: string }> {
    return this.request("session/list", params);
  }

  messages(params: {
    sessionId: string;
    cursor?: string;
    limit?: number;
    order?: "asc" | "desc";
  }): Promise<{ messages: Message[]; total: number; nextCursor?: string }> {
    return this.request("session/messages", params);
  }

  /** Every message of a session, page by page. */
  async allMessages(sessionId: string): Promise<Message[]> {
    const all: Message[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.messages({ sessionId, cursor, limit: 1000 });
      all.push(...page.messages);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    return all;
  }

  /** `session/configure`: fields left out stay as they are. */
  configure(params: {
    sessionId: string;
    title?: string | null;
    model?: string | null;
    mode?: SessionMode | null;
  }): Promise<Session> {
    return this.request("session/configure", params);
  }

  /** `session/commands`: the slash commands a prompt of the session may start with. */
  async commands(sessionId: string): Promise<SlashCommand[]> {
    return (await this.request<{ commands: SlashCommand[] }>("session/commands", { sessionId })).commands;
  }

  deleteSession(sessionId: string): Promise<{ deleted: boolean }> {
    return this.request("session/delete", { sessionId });
  }

  /** `session/fork`; a server that does not serve it yet rejects with code -32601. */
  fork(params: { sessionId: string; atMessageId?: string; title?: string }): Promise<Session> {
    return this.request("session/fork", params);
  }

  /** `session/checkpoints`: one per turn of the session that changed files, oldest first. */
  async checkpoints(sessionId: string): Promise<Checkpoint[]> {
    return (await this.request<{ checkpoints: Checkpoint[] }>("session/checkpoints", { sessionId })).checkpoints;
  }

  /**
   * `session/rewind`: back to before the turn whose prompt is `messageId`. A file changed outside
   * tether since it was recorded rejects with -32602 and `data.paths` (see `conflictingPaths`)
   * unless `force`.
   */
  rewind(params: RewindParams): Promise<RewindResult> {
    return this.request("session/rewind", params);
  }

  /** Send `kernel/run` now; its progress arrives through `onProgress`. */
  run(params: RunParams): RunHandle {
    return {
      sessionId: params.sessionId,
      result: this.request<RunResult>("kernel/run", params),
      cancel: () => this.cancel(params.sessionId),
    };
  }

  /** `kernel/cancel`: whether a run was going. */
  async cancel(sessionId: string): Promise<boolean> {
    const result = await this.request<{ cancelled: boolean }>("kernel/cancel", { sessionId });
    return result.cancelled;
  }

  /**
   * `shutdown` then `exit`, and wait for the process to end (killed after `timeoutMs`).
   * Resolves to the exit code.
   */
  async shutdown(timeoutMs = 10_000): Promise<number | null> {
    if (this.exitInfo) return this.exitInfo.code;
    this.stopping = true;
    const timer = setTimeout(() => this.process.kill("SIGKILL"), timeoutMs);
    try {
      await Promise.race([this.request("shutdown"), this.exited]);
      if (this.running) await this.connection.sendNotification("exit");
    } catch {
      // The server went away meanwhile, or cannot answer: it is killed below if need be.
      if (this.running) this.process.kill();
    }
    const info = await this.exited;
    clearTimeout(timer);
    return info.code;
  }

  /** Stop the server without ceremony (close stdin, which the server reads as `exit`). */
  dispose(): void {
    this.stopping = true;
    if (this.running) {
      this.process.stdin?.end();
      const timer = setTimeout(() => this.process.kill("SIGKILL"), 2000);
      void this.exited.then(() => clearTimeout(timer));
    }
    this.progressEmitter.dispose();
  }
}

/** The numeric code of a JSON-RPC error response, or undefined for other errors. */
export function errorCode(error: unknown): number | undefined {
  return error instanceof ResponseError ? error.code : undefined;
}
