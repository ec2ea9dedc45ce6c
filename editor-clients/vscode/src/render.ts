/** Text for people: error messages and session transcripts (no `vscode` import). */
import { proposal } from "./chat-model";
import { errorCode, type Message, type PermissionParams, type Session, type ToolKind } from "./rpc";

export function describe(error: unknown): string {
  const code = errorCode(error);
  const message = error instanceof Error ? error.message : String(error);
  return code === undefined ? message : `${message} (${code})`;
}

/** A session and its messages as Markdown. */
export function transcript(session: Session, messages: Message[]): string {
  const lines = [`# ${session.title ?? session.sessionId}`, "", `Workspace: ${session.workspace}`, ""];
  for (const message of messages) {
    lines.push(`## ${message.role}`, "");
    const content = message.content;
    if (typeof content === "string") lines.push(content);
    else if (content) {
      for (const block of content) {
        lines.push(block.type === "text" ? block.text : `[${block.type}]`);
      }
    }
    for (const call of message.toolCalls ?? []) lines.push(`- tool call \`${call.name}\` ${call.arguments}`);
    const metadata = message.metadata ?? {};
    if (metadata.cancelled === true) lines.push("", "_(cancelled)_");
    if (message.toolCallId) lines.push("", `(result of ${message.toolCallId}${message.isError ? ", error" : ""})`);
    // An edit's diff, as the live turn showed it.
    if (typeof metadata.diff === "string" && metadata.diff) lines.push("", "```diff", metadata.diff.replace(/\n$/, ""), "```");
    lines.push("");
  }
  return lines.join("\n");
}

/** A marker for the tools that change something (`edit`, `execute`), else "". */
export function kindMarker(kind: ToolKind | undefined): string {
  return kind === "edit" || kind === "execute" ? `(${kind}) ` : "";
}

/** The file a unified diff changes (its `+++ b/PATH` line, else `--- a/PATH` for a deletion). */
export function diffFile(diff: string): string | undefined {
  const plus = /^\+\+\+ b\/(.+)$/m.exec(diff);
  if (plus) return plus[1];
  return /^--- a\/(.+)$/m.exec(diff)?.[1];
}

/**
 * What a permission dialog says about a call: the diff of the change an edit proposes, else the
 * command to run or the arguments one per line, never the raw JSON string with its `\n` escapes.
 */
export function permissionDetail(params: PermissionParams): string {
  const lines: string[] = [];
  if (params.reason) lines.push(params.reason, "");
  if (params.diff) return [...lines, proposal(params.diff).diff].join("\n");
  let args: unknown;
  try {
    args = JSON.parse(params.toolCall.arguments || "{}");
  } catch {
    return [...lines, params.toolCall.arguments].join("\n");
  }
  if (args === null || typeof args !== "object") return [...lines, String(args)].join("\n");
  for (const [key, value] of Object.entries(args as Record<string, unknown>)) {
    const text = Array.isArray(value) ? value.map(String).join(" ") : typeof value === "string" ? value : JSON.stringify(value);
    lines.push(text.includes("\n") ? `${key}:\n${text}` : `${key}: ${text}`);
  }
  return lines.join("\n");
}
