/** Text for people: error messages and session transcripts (no `vscode` import). */
import { errorCode, type Message, type Session } from "./rpc";

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
    if (message.toolCallId) lines.push("", `(result of ${message.toolCallId}${message.isError ? ", error" : ""})`);
    lines.push("");
  }
  return lines.join("\n");
}
