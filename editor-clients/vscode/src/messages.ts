/**
 * The messages between the chat view's webview and the extension: the one module both sides
 * import, so each side's `postMessage` and `onDidReceiveMessage` are checked against the other.
 *
 * Progress events travel as the server sent them (`ProgressEvent` of docs/protocol.md): the
 * webview renders the wire vocabulary itself, which keeps recorded streams replayable in tests.
 * No `vscode` or Node import here: the webview bundle includes this file.
 */

export type ToolKind = "read" | "edit" | "execute" | "search" | "other";
export type StopReason = "end_turn" | "max_iterations" | "max_tokens" | "refusal" | "cancelled" | "output_invalid";
export type PermissionOutcome = "allow" | "allow_always" | "reject" | "reject_always";
/** A session's mode (docs/protocol.md, `session/configure {mode}`). */
export type SessionMode = "ask" | "accept_edits" | "read_only";

/** The modes a session runs in, as the pickers offer them (the status bar's and the view's). */
export const MODES: { mode: SessionMode; label: string; detail: string }[] = [
  { mode: "ask", label: "Ask", detail: "Edits and commands wait for your approval" },
  { mode: "accept_edits", label: "Accept edits", detail: "Edits apply without asking; commands are still asked" },
  { mode: "read_only", label: "Read only", detail: "Only tools that read: nothing is written or run" },
];

/**
 * The change an edit proposes, as the server computes it before asking (`tool/requestPermission`
 * and the pending `tool_call`): the whole file before (absent: a new file) and after.
 */
export interface ProposedDiff {
  /** Relative to the workspace root. */
  path: string;
  oldText?: string;
  newText: string;
}

/** The token counts of a run or of one model call (`Usage`); a run's `cost` in US dollars when its
 * model has a known price (absent: unknown, never free). */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cost?: number;
}

/** The `kernel/progress` events the view draws (docs/protocol.md, "Progress notifications"). */
export type ProgressEvent =
  | { kind: "run_started"; maxIterations: number; userMessageId: string }
  | { kind: "iteration_started"; iteration: number }
  | { kind: "message_delta"; messageId: string; text: string }
  /** Streamed reasoning of the model call `messageId` (not part of its answer). */
  | { kind: "thought_delta"; messageId: string; text: string }
  | {
      kind: "tool_call";
      toolCallId: string;
      name: string;
      arguments: string;
      title?: string;
      toolKind: ToolKind;
      status: "pending";
      /** An edit: the change it proposes. */
      diff?: ProposedDiff;
    }
  | {
      kind: "tool_call_update";
      toolCallId: string;
      status: "in_progress" | "completed" | "failed" | "cancelled";
      result?: string;
      error?: string;
      diff?: string;
      progress?: string;
    }
  | { kind: "iteration_finished"; iteration: number; toolCalls: number }
  | { kind: "run_finished"; stopReason: StopReason | "error"; iterations: number }
  /** The run recorded what it changed in the workspace's files (a restore point for its prompt). */
  | { kind: "checkpoint"; checkpointId: string; files: string[]; skipped?: string[] }
  | { kind: "warning"; code: number; message: string; data?: unknown }
  | { kind: "notice"; level: "info" | "warning" | "error"; message: string; data?: unknown }
  | { kind: "plan"; entries: PlanEntry[] };

/** A step of the session's plan (`update_plan`), as `session/get` and the `plan` event carry it. */
export interface PlanEntry {
  content: string;
  status: "pending" | "in_progress" | "completed";
  priority?: "high" | "medium" | "low";
}

/**
 * Where a sub-agent's progress belongs: its own session and run, and the `task` call that started it
 * (`parentRunId`, `parentToolCallId` of its `kernel/progress`; the parent is the view's run or one
 * of its sub-agents).
 */
export interface SubagentOrigin {
  sessionId: string;
  runId: string;
  parentRunId: string;
  parentToolCallId: string;
}

/** Context attached to the next prompt (the selection, or a whole file), shown as a chip. */
export interface ContextItem {
  /** What the chip says: `src/app.py:3-7`, `src/app.py`. */
  label: string;
  /** Workspace-relative path of the file it comes from. */
  file: string;
  /** 1-based inclusive line range; absent for a whole file. */
  lines?: [number, number];
  text: string;
}

/**
 * A workspace symbol offered after `@` (`vscode.executeWorkspaceSymbolProvider`): picked, its lines
 * of its file are attached as context.
 */
export interface SymbolMention {
  name: string;
  /** The symbol's kind as a codicon name's suffix (`function`, `class`, `method`, …). */
  kind: string;
  /** Workspace-relative path of its file. */
  file: string;
  /** 1-based inclusive line range of its definition. */
  lines: [number, number];
  /** The symbol it is declared in (a method's class). */
  container?: string;
}

/** A session as the list shows it. */
export interface SessionSummary {
  sessionId: string;
  /** The session's title, else its first prompt, else "New session". */
  title: string;
  updatedAt: string;
  messageCount: number;
  running: boolean;
  parentSessionId?: string;
}

/** A past turn, rebuilt from `session/messages` when a session is opened. */
export type TranscriptItem =
  /**
   * `messageId`: the prompt's message; `files`: what its turn changed, when it has a checkpoint
   * (the user message then offers Restore).
   */
  | { type: "user"; text: string; context?: ContextItem[]; messageId?: string; files?: string[] }
  /**
   * `cancelled`: the partial text of an answer cut short by a cancellation; `reasoning`: what the
   * model reasoned before it (`metadata.reasoning`), folded as the live view folds it.
   */
  | { type: "assistant"; text: string; cancelled?: boolean; reasoning?: string }
  | {
      type: "tool";
      toolCallId: string;
      name: string;
      title: string;
      toolKind: ToolKind;
      status: "completed" | "failed" | "cancelled" | "pending";
      output?: string;
      /** The unified diff of what an edit changed. */
      diff?: string;
      /** A `task` call: its sub-agent's session. */
      childSessionId?: string;
    }
  /** The end of a run, as the line under a live answer says it (`turnFinished`). */
  | { type: "runEnd"; stopReason: StopReason; usage: Usage; model?: string };

/** Extension → webview. */
export type ToWebview =
  /** Everything the view shows, sent when it (re)loads and when the session changes. */
  | {
      type: "session";
      sessionId?: string;
      title?: string;
      items: TranscriptItem[];
      running: boolean;
      /** The session's plan, shown above the prompt (absent: none). */
      plan?: PlanEntry[];
    }
  | { type: "sessions"; sessions: SessionSummary[]; currentId?: string }
  | { type: "context"; items: ContextItem[] }
  /** A prompt was sent: echo it with its context before the progress of its run arrives. */
  | { type: "turnStarted"; prompt: string; context: ContextItem[]; sessionId: string; title: string }
  /** `subagent`: the event is a sub-agent's, to be shown under the `task` call that started it. */
  | { type: "progress"; event: ProgressEvent; subagent?: SubagentOrigin }
  /** The run's answer: which model, tokens used. */
  | {
      type: "turnFinished";
      stopReason: StopReason | "error";
      model?: string;
      usage?: Usage;
      error?: string;
    }
  /**
   * `tool/requestPermission` for a call already drawn as a card. `diff` is the proposed change of
   * an edit (unified diff, computed before anything is written), `file` its path.
   */
  | {
      type: "permission";
      requestId: string;
      /** The sub-agent's run whose call asks (its card is in the sub-agent's box). */
      subagentRunId?: string;
      toolCallId: string;
      title: string;
      toolKind: ToolKind;
      reason?: string;
      file?: string;
      diff?: string;
      command?: string;
    }
  /** The question is answered (here or elsewhere) or withdrawn by the server. */
  | { type: "permissionClosed"; requestId: string; outcome?: PermissionOutcome }
  | { type: "error"; message: string }
  /**
   * The workspace's files whose path matches `query` (the `@` word being typed), and its symbols
   * whose name does, for completion.
   */
  | { type: "mentions"; query: string; files: string[]; symbols: SymbolMention[] }
  /** The mode and model of the view's session (the picker beside the prompt shows them). */
  | { type: "sessionConfig"; mode: SessionMode; model?: string }
  /** Put the keyboard focus in the prompt. */
  | { type: "focus" }
  /** The slash commands of the view's session (`session/commands`), for `/` completion. */
  | { type: "commands"; commands: { name: string; description: string; argumentHint?: string }[] }
  /** Something the user should know about the view's conversation (e.g. it could not be resumed). */
  | { type: "notice"; level: "info" | "warning"; message: string };

/** Webview → extension. */
export type FromWebview =
  | { type: "ready" }
  | { type: "send"; text: string }
  | { type: "stop" }
  | { type: "attach"; what: "selection" | "file" }
  | { type: "detach"; index: number }
  | { type: "answer"; requestId: string; outcome: PermissionOutcome }
  | { type: "openDiff"; requestId: string }
  | { type: "newSession" }
  | { type: "listSessions" }
  | { type: "switchSession"; sessionId: string }
  | { type: "forkSession"; sessionId: string }
  | { type: "deleteSession"; sessionId: string }
  /** Restore files, conversation or both to before the prompt `messageId` (the extension asks which). */
  | { type: "restore"; messageId: string }
  /** Send the prompt of the turn that ended in an error again (that turn's messages are dropped first). */
  | { type: "retry" }
  /** Files for the `@` word being typed. */
  | { type: "mentions"; query: string }
  /** Attach a workspace file (picked after `@`) as context of the next prompt. */
  | { type: "attachFile"; path: string }
  /** Attach the lines of a workspace symbol (picked after `@`) as context of the next prompt. */
  | { type: "attachSymbol"; symbol: SymbolMention }
  /** The mode picker of the view: `session/configure {mode}` on the view's session. */
  | { type: "setMode"; mode: SessionMode }
  /** The model button of the view: the Set Model picker. */
  | { type: "pickModel" }
  /** The slash commands, asked when the user first types `/` in a session. */
  | { type: "commands" }
  /** A sub-agent's Open: show its session (in the view when no run is going, else as a transcript). */
  | { type: "openSession"; sessionId: string }
  /** A code block's Copy: put `text` on the clipboard. */
  | { type: "copy"; text: string }
  /** A code block's Insert: put `text` at the cursor of the editor (replacing its selection). */
  | { type: "insert"; text: string }
  /**
   * A code block's Apply: the change shown as a diff, written once accepted. `path`: the file the
   * block names (its fence's info after the language, or the file named just before it).
   */
  | { type: "apply"; text: string; path?: string };

/** The model text of a prompt with its context appended (what `kernel/run` is sent). */
export function promptWithContext(text: string, context: ContextItem[]): string {
  const parts = [text];
  for (const item of context) {
    const where = item.lines ? `${item.file}, lines ${item.lines[0]}-${item.lines[1]}` : item.file;
    parts.push(`Context: ${where}:\n\`\`\`\n${item.text}\n\`\`\``);
  }
  return parts.join("\n\n");
}

const CONTEXT = /\n\nContext: ([^\n]+?)(?:, lines (\d+)-(\d+))?:\n```\n([\s\S]*?)\n```(?=\n\nContext: |$)/g;

/** The inverse of `promptWithContext`: the prompt a person typed, and the context sent with it. */
export function splitContext(prompt: string): { text: string; context: ContextItem[] } {
  const start = prompt.search(/\n\nContext: /);
  if (start < 0) return { text: prompt, context: [] };
  const context: ContextItem[] = [];
  let end = start;
  for (const match of prompt.slice(start).matchAll(CONTEXT)) {
    const [whole, file, first, last, text] = match;
    if (match.index !== end - start) break;
    const lines: [number, number] | undefined = first && last ? [Number(first), Number(last)] : undefined;
    context.push({ label: lines ? `${file}:${first}-${last}` : file, file, lines, text });
    end += whole.length;
  }
  if (end !== prompt.length) return { text: prompt, context: [] };
  return { text: prompt.slice(0, start), context };
}
