/**
 * What the chat view shows, computed from the server's data without `vscode`: transcripts rebuilt
 * from `session/messages` and their `metadata`, session titles, and the unified diff of the change
 * the server proposes for an edit before the user allows it. Runs, and is tested, under plain Node.
 */
import { createTwoFilesPatch } from "diff";

import {
  splitContext,
  type ProposedDiff,
  type SessionSummary,
  type StopReason,
  type ToolKind,
  type TranscriptItem,
  type Usage,
} from "./messages";
import type { Checkpoint, Message, Session } from "./rpc";

const KINDS: Record<string, ToolKind> = {
  read_file: "read",
  list_files: "search",
  search_text: "search",
  write_file: "edit",
  edit_file: "edit",
  run_command: "execute",
  state_set: "edit",
  state_get: "read",
  update_plan: "other",
};

const KIND_NAMES: Record<ToolKind, true> = { read: true, edit: true, execute: true, search: true, other: true };

/**
 * The kind of a call in a stored transcript: the one the server recorded (the assistant message's
 * `metadata.toolKinds`, where `other` is not listed), else, for a message that lists none, the
 * built-in tool's.
 */
export function toolKind(name: string, recorded?: Record<string, unknown>, toolCallId?: string): ToolKind {
  if (recorded) {
    const kind = toolCallId === undefined ? undefined : recorded[toolCallId];
    return typeof kind === "string" && kind in KIND_NAMES ? (kind as ToolKind) : "other";
  }
  return KINDS[name] ?? "other";
}

function parseArgs(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text || "{}");
    return value !== null && typeof value === "object" ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * The title of a call in a stored transcript, the way the server titles live calls
 * (server/tether/tools/titles.py): `Read src/app.py`, `Run pytest -q`.
 */
export function callTitle(name: string, argumentsText: string): string {
  const args = parseArgs(argumentsText);
  const path = typeof args.path === "string" && args.path ? args.path : ".";
  const command = Array.isArray(args.command) ? args.command.join(" ") : String(args.command ?? "a command");
  const titles: Record<string, string> = {
    read_file: `Read ${path}`,
    list_files: `List ${path}` + (typeof args.glob === "string" && args.glob ? ` (${args.glob})` : ""),
    search_text: `Search '${String(args.pattern)}' in ${path}`,
    write_file: `Write ${path}`,
    edit_file: `Edit ${path}`,
    run_command: `Run ${command.split(/\s+/).join(" ")}`,
  };
  if (name === "task") titles.task = taskTitle(args);
  const [server, tool] = name.split("__", 2);
  return titles[name] ?? (tool ? `${server}: ${tool}` : name);
}

/** A sub-agent's call, as the server titles it: `Task (reviewer): Check the notes`. */
function taskTitle(args: Record<string, unknown>): string {
  const given = (value: unknown): string | undefined => (typeof value === "string" && value.trim() ? value : undefined);
  const agent = given(args.agent) ? ` (${String(args.agent)})` : "";
  const first = (given(args.description) ?? given(args.prompt))?.trim().split("\n", 1)[0];
  return first ? `Task${agent}: ${first}` : `Task${agent}`;
}

function textOf(content: Message["content"]): string {
  if (typeof content === "string") return content;
  return (content ?? []).map((block) => (block.type === "text" ? block.text : `[${block.type}]`)).join("\n");
}

function metadataOf(message: Message): Record<string, unknown> {
  const metadata = message.metadata;
  return metadata !== null && typeof metadata === "object" ? (metadata as Record<string, unknown>) : {};
}

function objectOf(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === "object" ? (value as Record<string, unknown>) : undefined;
}

/** The result a call that did not finish is given when its run is cancelled. */
const CANCELLED_RESULT = "cancelled";

const STOP_REASONS: readonly string[] = ["end_turn", "max_iterations", "max_tokens", "refusal", "cancelled", "output_invalid"];

/** A run as its stored messages tell it: the line that ends it live, rebuilt. */
class RunEnd {
  readonly usage: Usage = { inputTokens: 0, outputTokens: 0 };
  cancelled = false;
  /** The stop reason stored with the run's last answer, when the server keeps one. */
  recorded: StopReason | undefined;
  /** The last model call asked for tools (and no answer followed). */
  endedWithCalls = false;
  /** Model calls: a run that made none (a compaction's) has no end line. */
  answers = 0;

  add(message: Message): void {
    if (message.kind === "compaction") return;
    this.answers += 1;
    const metadata = metadataOf(message);
    const usage = objectOf(metadata.usage);
    if (usage) {
      this.usage.inputTokens += Number(usage.inputTokens ?? 0);
      this.usage.outputTokens += Number(usage.outputTokens ?? 0);
    }
    if (metadata.cancelled === true) this.cancelled = true;
    if (typeof metadata.stopReason === "string" && STOP_REASONS.includes(metadata.stopReason)) {
      this.recorded = metadata.stopReason as StopReason;
    }
    this.endedWithCalls = (message.toolCalls ?? []).length > 0;
  }

  /**
   * The stop reason: the stored one, else what the messages show (a cancelled answer, or calls
   * that never got their answer). An answer cut at `max_tokens` or refused can only be told apart
   * from `end_turn` by a stored stop reason.
   */
  item(): Extract<TranscriptItem, { type: "runEnd" }> {
    const stopReason: StopReason =
      this.recorded ?? (this.cancelled ? "cancelled" : this.endedWithCalls ? "max_iterations" : "end_turn");
    return { type: "runEnd", stopReason, usage: { ...this.usage } };
  }
}

/**
 * A session's messages as the items of the chat view, the way the live turn showed them: the
 * answers with the reasoning before them (a cancelled one's partial text marked), each call with
 * its kind, its result or the diff of its edit, and each run's end with the tokens it used.
 */
export function transcriptItems(messages: Message[], checkpoints: readonly Checkpoint[] = []): TranscriptItem[] {
  const changed = new Map(checkpoints.map((checkpoint) => [checkpoint.messageId, checkpoint.files]));
  const items: TranscriptItem[] = [];
  const tools = new Map<string, Extract<TranscriptItem, { type: "tool" }>>();
  let run: { id: string; end: RunEnd } | undefined;
  const closeRun = (): void => {
    if (run && run.end.answers > 0) items.push(run.end.item());
    run = undefined;
  };
  for (const message of messages) {
    if (message.runId !== undefined && message.runId !== run?.id) {
      closeRun();
      run = { id: message.runId, end: new RunEnd() };
    } else if (message.runId === undefined && message.role === "user") {
      closeRun();
    }
    if (message.role === "user") {
      const { text, context } = splitContext(textOf(message.content));
      const item: Extract<TranscriptItem, { type: "user" }> = { type: "user", text, messageId: message.id };
      if (context.length > 0) item.context = context;
      const files = changed.get(message.id);
      if (files && files.length > 0) item.files = files;
      items.push(item);
    } else if (message.role === "assistant") {
      run?.end.add(message);
      const metadata = metadataOf(message);
      const text = textOf(message.content);
      const reasoning = typeof metadata.reasoning === "string" ? metadata.reasoning : "";
      if (text || reasoning) {
        const item: Extract<TranscriptItem, { type: "assistant" }> = { type: "assistant", text };
        if (metadata.cancelled === true) item.cancelled = true;
        if (reasoning) item.reasoning = reasoning;
        items.push(item);
      }
      const kinds = objectOf(metadata.toolKinds);
      for (const call of message.toolCalls ?? []) {
        const item: Extract<TranscriptItem, { type: "tool" }> = {
          type: "tool",
          toolCallId: call.id,
          name: call.name,
          title: callTitle(call.name, call.arguments),
          toolKind: toolKind(call.name, kinds, call.id),
          status: "pending",
        };
        tools.set(call.id, item);
        items.push(item);
      }
    } else if (message.role === "tool" && message.toolCallId) {
      const item = tools.get(message.toolCallId);
      if (item) {
        const output = textOf(message.content);
        item.status = !message.isError ? "completed" : output === CANCELLED_RESULT ? "cancelled" : "failed";
        item.output = output;
        const diff = metadataOf(message).diff;
        if (typeof diff === "string" && diff) item.diff = diff;
        // A `task` call's result names its sub-agent's session: the card offers to open it.
        const child = objectOf(message.output)?.sessionId;
        if (typeof child === "string") item.childSessionId = child;
      }
    }
  }
  closeRun();
  return items;
}

/**
 * What a rewind at the prompt `messageId` puts back: the files its turn changed and those of every
 * later turn (each once, in the order the checkpoints list them). Empty when no turn from there on
 * changed a file.
 */
export function filesFrom(checkpoints: readonly Checkpoint[], messageId: string): string[] {
  const start = checkpoints.findIndex((checkpoint) => checkpoint.messageId === messageId);
  if (start < 0) return [];
  return [...new Set(checkpoints.slice(start).flatMap((checkpoint) => checkpoint.files))];
}

/** The first line of a prompt, short enough for a list. */
export function shortTitle(prompt: string, max = 60): string {
  const line = prompt.trim().split("\n", 1)[0] ?? "";
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
}

/** A session for the list: its title, else its first prompt (`firstPrompt`), else "New session". */
export function summary(session: Session, firstPrompt?: string): SessionSummary {
  return {
    sessionId: session.sessionId,
    title: session.title || (firstPrompt ? shortTitle(firstPrompt) : "New session"),
    updatedAt: session.updatedAt,
    messageCount: session.messageCount,
    running: session.running,
    parentSessionId: session.parentSessionId,
  };
}

/** The first user prompt among messages, if any. */
export function firstPrompt(messages: Message[]): string | undefined {
  const first = messages.find((message) => message.role === "user");
  return first ? splitContext(textOf(first.content)).text : undefined;
}

/** What an edit would change: the file before and after, and the unified diff between them. */
export interface Proposal {
  /** Workspace-relative path. */
  path: string;
  before: string;
  after: string;
  diff: string;
  /** The file does not exist yet. */
  created: boolean;
}

/**
 * The change an edit proposes, from the server's `diff` (`tool/requestPermission`, the pending
 * `tool_call`): the texts before and after, and the unified diff a person reads.
 */
export function proposal(proposed: ProposedDiff): Proposal {
  const created = proposed.oldText === undefined || proposed.oldText === null;
  const before = created ? "" : (proposed.oldText ?? "");
  const diff = createTwoFilesPatch(
    created ? "/dev/null" : `a/${proposed.path}`,
    `b/${proposed.path}`,
    before,
    proposed.newText,
    undefined,
    undefined,
    { context: 3 },
  );
  return { path: proposed.path, before, after: proposed.newText, diff: diff.replace(/^=+\n/m, ""), created };
}
