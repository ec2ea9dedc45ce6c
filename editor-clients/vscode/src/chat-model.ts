/**
 * What the chat view shows, computed from the server's data without `vscode`: transcripts rebuilt
 * from `session/messages`, session titles, and the change an edit proposes (diffed before the
 * user allows it). Runs, and is tested, under plain Node.
 */
import { readFileSync } from "node:fs";
import { isAbsolute, relative, resolve, sep } from "node:path";

import { createTwoFilesPatch } from "diff";

import { splitContext, type SessionSummary, type ToolKind, type TranscriptItem } from "./messages";
import type { Message, Session } from "./rpc";

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

/** The kind of a built-in tool (stored messages do not carry it). */
export function toolKind(name: string): ToolKind {
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
  const [server, tool] = name.split("__", 2);
  return titles[name] ?? (tool ? `${server}: ${tool}` : name);
}

function textOf(content: Message["content"]): string {
  if (typeof content === "string") return content;
  return (content ?? []).map((block) => (block.type === "text" ? block.text : `[${block.type}]`)).join("\n");
}

/** A session's messages as the items of the chat view. */
export function transcriptItems(messages: Message[]): TranscriptItem[] {
  const items: TranscriptItem[] = [];
  const tools = new Map<string, Extract<TranscriptItem, { type: "tool" }>>();
  for (const message of messages) {
    if (message.role === "user") {
      const { text, context } = splitContext(textOf(message.content));
      items.push(context.length > 0 ? { type: "user", text, context } : { type: "user", text });
    }
    else if (message.role === "assistant") {
      const text = textOf(message.content);
      if (text) items.push({ type: "assistant", text });
      for (const call of message.toolCalls ?? []) {
        const item: Extract<TranscriptItem, { type: "tool" }> = {
          type: "tool",
          toolCallId: call.id,
          name: call.name,
          title: callTitle(call.name, call.arguments),
          toolKind: toolKind(call.name),
          status: "pending",
        };
        tools.set(call.id, item);
        items.push(item);
      }
    } else if (message.role === "tool" && message.toolCallId) {
      const item = tools.get(message.toolCallId);
      if (item) {
        item.status = message.isError ? "failed" : "completed";
        item.output = textOf(message.content);
      }
    }
  }
  return items;
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
 * The change a `write_file` or `edit_file` call would make, computed from its arguments and the
 * file as it is now, before the user decides. Undefined for other tools, arguments that do not
 * name a file inside the workspace, or an edit whose `oldString` does not match (the tool itself
 * then fails and says why).
 */
export function proposal(name: string, argumentsText: string, root: string): Proposal | undefined {
  if (name !== "write_file" && name !== "edit_file") return undefined;
  const args = parseArgs(argumentsText);
  if (typeof args.path !== "string" || !args.path) return undefined;
  const absolute = isAbsolute(args.path) ? args.path : resolve(root, args.path);
  const path = relative(root, absolute);
  if (path.startsWith(`..${sep}`) || path === ".." || isAbsolute(path)) return undefined;
  let before = "";
  let created = false;
  try {
    before = readFileSync(absolute, "utf8");
  } catch {
    created = true;
  }
  let after: string;
  if (name === "write_file") {
    if (typeof args.content !== "string") return undefined;
    after = args.content;
  } else {
    if (created || typeof args.oldString !== "string" || typeof args.newString !== "string") return undefined;
    const crlf = before.includes("\r\n");
    const fix = (text: string): string => (crlf ? text.replace(/\r?\n/g, "\r\n") : text);
    const oldString = fix(args.oldString);
    const newString = fix(args.newString);
    if (!oldString || !before.includes(oldString)) return undefined;
    after =
      args.replaceAll === true
        ? before.split(oldString).join(newString)
        : before.replace(oldString, () => newString);
  }
  const diff = createTwoFilesPatch(
    created ? "/dev/null" : `a/${path}`,
    `b/${path}`,
    before,
    after,
    undefined,
    undefined,
    { context: 3 },
  );
  return { path, before, after, diff: diff.replace(/^=+\n/m, ""), created };
}
