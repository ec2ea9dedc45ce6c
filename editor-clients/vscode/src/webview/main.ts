/**
 * The chat view's script, running inside the webview (a browser, no Node, no `vscode`).
 *
 * It draws what the extension sends (`ToWebview`) and reports what the user does (`FromWebview`);
 * it holds no connection of its own. The DOM is built with `textContent` and Markdown rendered
 * with HTML disabled, so nothing the model or a tool writes becomes markup.
 */
import hljs from "highlight.js/lib/common";
import MarkdownIt from "markdown-it";

import type {
  ContextItem,
  FromWebview,
  PermissionOutcome,
  PlanEntry,
  ProgressEvent,
  SessionSummary,
  StopReason,
  ToWebview,
  ToolKind,
  TranscriptItem,
  Usage,
} from "../messages";
import { relativeTime } from "../relative-time";

declare function acquireVsCodeApi(): { postMessage(message: unknown): void };

const vscode = acquireVsCodeApi();
const post = (message: FromWebview): void => vscode.postMessage(message);

const markdown: MarkdownIt = new MarkdownIt({
  html: false,
  linkify: true,
  breaks: false,
  highlight: (code: string, language: string): string => {
    const lang = language && hljs.getLanguage(language) ? language : undefined;
    const html = lang ? hljs.highlight(code, { language: lang }).value : hljs.highlightAuto(code).value;
    return `<pre class="hljs"><code>${html}</code></pre>`;
  },
});
// Links only where the text says so: `app.py` is a file name, not a Paraguayan domain.
markdown.linkify.set({ fuzzyLink: false });

// -- small DOM helpers ------------------------------------------------------------------------

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string,
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function icon(name: string, extra = ""): HTMLElement {
  const node = el("span", `codicon codicon-${name} ${extra}`.trim());
  node.setAttribute("aria-hidden", "true");
  return node;
}

function button(label: string, iconName: string | undefined, className: string, onClick: () => void): HTMLButtonElement {
  const node = el("button", className);
  node.type = "button";
  if (iconName) node.append(icon(iconName));
  if (label) node.append(el("span", "label", label));
  node.title = label;
  node.addEventListener("click", onClick);
  return node;
}

function iconButton(title: string, iconName: string, onClick: () => void): HTMLButtonElement {
  const node = button("", iconName, "icon-button", onClick);
  node.title = title;
  node.setAttribute("aria-label", title);
  return node;
}

function highlighted(text: string, language: string): HTMLElement {
  const pre = el("pre", "hljs output");
  const code = el("code");
  code.innerHTML = hljs.highlight(text, { language }).value;
  pre.append(code);
  return pre;
}

const KIND_ICONS: Record<ToolKind, string> = {
  read: "file",
  edit: "edit",
  execute: "terminal",
  search: "search",
  other: "tools",
};

type CardStatus = "pending" | "approval" | "in_progress" | "completed" | "failed" | "cancelled";

const STATUS: Record<CardStatus, { icon: string; label: string }> = {
  pending: { icon: "circle-outline", label: "pending" },
  approval: { icon: "question", label: "awaiting approval" },
  in_progress: { icon: "loading codicon-modifier-spin", label: "running" },
  completed: { icon: "pass", label: "completed" },
  failed: { icon: "error", label: "failed" },
  cancelled: { icon: "circle-slash", label: "cancelled" },
};

// -- the page --------------------------------------------------------------------------------

const root = document.getElementById("app") ?? document.body;
const header = el("header", "header");
const titleNode = el("div", "session-title", "New session");
const headerActions = el("div", "header-actions");
const sessionsPanel = el("section", "sessions hidden");
sessionsPanel.setAttribute("aria-label", "Sessions");
const log = el("main", "log");
log.setAttribute("aria-live", "polite");
const empty = el("div", "empty");
const planPanel = el("section", "plan hidden");
const composer = el("footer", "composer");
const chips = el("div", "chips");
const input = el("textarea", "prompt");
const sendButton = button("Send", "send", "primary send", () => send());
const stopButton = button("Stop", "debug-stop", "secondary stop hidden", () => post({ type: "stop" }));

function buildPage(): void {
  headerActions.append(
    iconButton("Sessions", "history", () => toggleSessions()),
    iconButton("Fork this session", "repo-forked", () => {
      if (state.sessionId) post({ type: "forkSession", sessionId: state.sessionId });
    }),
    iconButton("New session", "add", () => post({ type: "newSession" })),
  );
  header.append(icon("sparkle", "brand"), titleNode, headerActions);
  empty.append(
    el("h2", "", "Ask tether"),
    el("p", "", "Ask about this workspace or ask for a change. Edits are shown as a diff and wait for your approval."),
    el("p", "hint", "Enter sends, Shift+Enter starts a new line. Attach the selection or the current file as context."),
  );
  input.placeholder = "Ask tether… (Enter to send, Shift+Enter for a new line)";
  input.rows = 3;
  input.setAttribute("aria-label", "Prompt");
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  const tools = el("div", "composer-tools");
  tools.append(
    button("Selection", "list-selection", "chip-button attach-selection", () =>
      post({ type: "attach", what: "selection" }),
    ),
    button("Current file", "file-add", "chip-button attach-file", () => post({ type: "attach", what: "file" })),
    el("span", "spacer"),
    stopButton,
    sendButton,
  );
  composer.append(chips, input, tools);
  log.append(empty);
  planPanel.setAttribute("aria-label", "Plan");
  root.append(header, sessionsPanel, log, planPanel, composer);
}

// -- state -----------------------------------------------------------------------------------

interface Card {
  node: HTMLElement;
  statusNode: HTMLElement;
  body: HTMLElement;
  actions: HTMLElement;
  toolKind: ToolKind;
  status: CardStatus;
}

interface Turn {
  node: HTMLElement;
  /** The prompt's message: its header gets the Restore action once its turn changed files. */
  user: HTMLElement;
  /** The prompt's message id (`run_started.userMessageId`, or the stored message's). */
  messageId?: string;
  /** messageId → its Markdown block and text so far. */
  texts: Map<string, { node: HTMLElement; text: string }>;
  /** The answer the current model call is streaming: a cancellation cuts it short. */
  streaming?: string;
  cards: Map<string, Card>;
  footer: HTMLElement;
}

const state: {
  sessionId?: string;
  running: boolean;
  turn?: Turn;
  context: ContextItem[];
  sessionsShown: boolean;
  /** toolCallId → its card, across turns (permission requests find them here). */
  cards: Map<string, Card>;
  permissions: Map<string, string>;
} = { running: false, context: [], sessionsShown: false, cards: new Map(), permissions: new Map() };

function setRunning(running: boolean): void {
  state.running = running;
  sendButton.classList.toggle("hidden", running);
  stopButton.classList.toggle("hidden", !running);
  document.body.classList.toggle("running", running);
}

function send(): void {
  const text = input.value.trim();
  if (!text || state.running) return;
  input.value = "";
  post({ type: "send", text });
}

function scrollToEnd(): void {
  log.scrollTop = log.scrollHeight;
}

// -- rendering -------------------------------------------------------------------------------

function renderMarkdown(node: HTMLElement, text: string): void {
  node.innerHTML = markdown.render(text);
}

function newTurn(prompt: string, context: ContextItem[], messageId?: string): Turn {
  empty.remove();
  const node = el("section", "turn");
  const user = el("div", "message user");
  const who = el("div", "who");
  who.append(icon("account"), el("span", "", "You"));
  const body = el("div", "markdown");
  renderMarkdown(body, prompt);
  user.append(who, body);
  if (context.length > 0) {
    const row = el("div", "chips sent");
    for (const item of context) row.append(chip(item));
    user.append(row);
  }
  const footer = el("div", "turn-footer");
  node.append(user, footer);
  log.append(node);
  const turn: Turn = { node, user, texts: new Map(), cards: new Map(), footer };
  if (messageId) setPromptId(turn, messageId);
  state.turn = turn;
  scrollToEnd();
  return turn;
}

function setPromptId(turn: Turn, messageId: string): void {
  turn.messageId = messageId;
  turn.user.dataset.messageId = messageId;
}

/**
 * The Restore action on a prompt whose turn changed files (`files`, shown in its tooltip): the
 * extension asks what to restore (files, conversation or both) and shows the files first.
 */
function offerRestore(turn: Turn, files: string[]): void {
  const messageId = turn.messageId;
  if (!messageId || files.length === 0) return;
  const title = `Restore to before this prompt (changed: ${files.join(", ")})`;
  let action = turn.user.querySelector<HTMLButtonElement>("button.restore");
  if (!action) {
    action = button("Restore", "discard", "icon-button restore", () => post({ type: "restore", messageId }));
    turn.user.querySelector(".who")?.append(action);
  }
  action.title = title;
  action.setAttribute("aria-label", title);
  action.dataset.files = files.join("\n");
}

function assistantBlock(turn: Turn, messageId: string): { node: HTMLElement; text: string } {
  let block = turn.texts.get(messageId);
  if (!block) {
    const message = el("div", "message assistant");
    message.dataset.messageId = messageId;
    const who = el("div", "who");
    who.append(icon("sparkle"), el("span", "", "tether"));
    const node = el("div", "markdown");
    message.append(who, node);
    turn.node.insertBefore(message, turn.footer);
    block = { node, text: "" };
    turn.texts.set(messageId, block);
  }
  return block;
}

let pendingRender = new Set<{ node: HTMLElement; text: string }>();
let renderScheduled = false;

/** Streamed text is re-rendered at most once per task, however many deltas arrive. */
function scheduleRender(block: { node: HTMLElement; text: string }): void {
  pendingRender.add(block);
  if (renderScheduled) return;
  renderScheduled = true;
  setTimeout(() => {
    renderScheduled = false;
    const blocks = pendingRender;
    pendingRender = new Set();
    for (const item of blocks) renderMarkdown(item.node, item.text);
    scrollToEnd();
  }, 0);
}

function setStatus(card: Card, status: CardStatus): void {
  card.status = status;
  card.node.dataset.status = status;
  const { icon: iconName, label } = STATUS[status];
  card.statusNode.replaceChildren(icon(iconName), el("span", "", label));
}

function toolCard(
  parent: HTMLElement,
  before: Node | null,
  toolCallId: string,
  title: string,
  kind: ToolKind,
  name: string,
): Card {
  const node = el("div", "tool-card");
  node.dataset.toolCallId = toolCallId;
  node.dataset.kind = kind;
  const head = el("div", "tool-head");
  const kindIcon = icon(KIND_ICONS[kind] ?? "tools", "kind");
  kindIcon.title = kind;
  const titleNode = el("span", "tool-title", title);
  titleNode.title = name;
  const statusNode = el("span", "tool-status");
  head.append(kindIcon, titleNode, statusNode);
  const body = el("div", "tool-body");
  const actions = el("div", "tool-actions");
  node.append(head, body, actions);
  parent.insertBefore(node, before);
  const card: Card = { node, statusNode, body, actions, toolKind: kind, status: "pending" };
  setStatus(card, "pending");
  state.cards.set(toolCallId, card);
  return card;
}

function setOutput(card: Card, output: string, label: string, language?: string, open = false): void {
  const details = el("details", "tool-output");
  details.open = open;
  const summary = el("summary");
  summary.append(icon("chevron-right", "twisty"), el("span", "", label));
  details.append(summary, language ? highlighted(output, language) : el("pre", "output", output));
  card.body.querySelector(".tool-output")?.remove();
  card.body.append(details);
}

function progress(event: ProgressEvent): void {
  const turn = state.turn ?? newTurn("", []);
  switch (event.kind) {
    case "run_started":
      setRunning(true);
      if (!turn.messageId) setPromptId(turn, event.userMessageId);
      break;
    case "checkpoint":
      offerRestore(turn, event.files);
      break;
    case "iteration_started":
      turn.streaming = undefined;
      break;
    case "message_delta": {
      turn.streaming = event.messageId;
      const block = assistantBlock(turn, event.messageId);
      block.text += event.text;
      scheduleRender(block);
      break;
    }
    case "tool_call": {
      const card = toolCard(
        turn.node,
        turn.footer,
        event.toolCallId,
        event.title ?? event.name,
        event.toolKind,
        event.name,
      );
      turn.cards.set(event.toolCallId, card);
      scrollToEnd();
      break;
    }
    case "tool_call_update": {
      const card = state.cards.get(event.toolCallId);
      if (!card) break;
      clearApproval(card);
      setStatus(card, event.status);
      if (event.progress) {
        let lines = card.body.querySelector<HTMLElement>(".tool-progress");
        if (!lines) {
          lines = el("pre", "tool-progress");
          card.body.prepend(lines);
        }
        lines.textContent = `${lines.textContent ?? ""}${event.progress}\n`;
      }
      if (event.status === "completed") {
        card.body.querySelector(".proposal")?.remove();
        if (event.diff) setOutput(card, event.diff, "Diff", "diff");
        else if (event.result) setOutput(card, event.result, "Output");
      } else if (event.status === "failed") {
        setOutput(card, event.error ?? event.result ?? "failed", "Error", undefined, true);
      }
      break;
    }
    case "plan":
      showPlan(event.entries);
      break;
    case "warning":
    case "notice": {
      const warning = el("div", "notice warning");
      warning.append(icon("warning"), el("span", "", event.message));
      turn.node.insertBefore(warning, turn.footer);
      break;
    }
    case "run_finished":
      setRunning(false);
      if (event.stopReason === "cancelled" && turn.streaming) {
        const block = turn.texts.get(turn.streaming);
        if (block) markCancelled(block.node);
      }
      for (const card of turn.cards.values()) {
        if (card.status === "pending" || card.status === "approval" || card.status === "in_progress") {
          clearApproval(card);
          setStatus(card, "cancelled");
        }
      }
      break;
    default:
      break;
  }
}

/** An answer cut short by a cancellation: its partial text, marked so. */
function markCancelled(markdownNode: HTMLElement): void {
  const message = markdownNode.parentElement;
  if (!message || message.classList.contains("cancelled")) return;
  message.classList.add("cancelled");
  message.querySelector(".who")?.append(el("span", "badge", "cancelled"));
}

function clearApproval(card: Card): void {
  card.actions.replaceChildren();
  card.node.classList.remove("asking");
}

function permission(message: Extract<ToWebview, { type: "permission" }>): void {
  let card = state.cards.get(message.toolCallId);
  if (!card) {
    const turn = state.turn ?? newTurn("", []);
    card = toolCard(turn.node, turn.footer, message.toolCallId, message.title, message.toolKind, message.title);
  }
  state.permissions.set(message.requestId, message.toolCallId);
  setStatus(card, "approval");
  card.node.classList.add("asking");
  if (message.reason) {
    const reason = el("div", "notice warning");
    reason.append(icon("shield"), el("span", "", message.reason));
    card.body.append(reason);
  }
  if (message.diff) {
    const proposal = el("div", "proposal");
    proposal.append(highlighted(message.diff, "diff"));
    card.body.append(proposal);
  } else if (message.command) {
    const command = el("div", "proposal");
    command.append(highlighted(`$ ${message.command}`, "bash"));
    card.body.append(command);
  }
  const answer = (outcome: PermissionOutcome) => () => {
    post({ type: "answer", requestId: message.requestId, outcome });
    card.actions.querySelectorAll("button").forEach((b) => (b.disabled = true));
  };
  const buttons: HTMLElement[] = [];
  if (message.diff) {
    buttons.push(button("Review diff", "diff", "secondary review", () => post({ type: "openDiff", requestId: message.requestId })));
  }
  buttons.push(
    button("Allow", "check", "primary allow", answer("allow")),
    button("Always allow", "check-all", "secondary always", answer("allow_always")),
    button("Reject", "close", "secondary reject", answer("reject")),
    button("Always reject", "circle-slash", "secondary never", answer("reject_always")),
  );
  buttons[buttons.length - 3].title = `Allow ${message.title} and every later call of this tool in this session`;
  buttons[buttons.length - 1].title = `Reject ${message.title} and every later call of this tool in this session`;
  card.actions.replaceChildren(...buttons);
  scrollToEnd();
}

function permissionClosed(requestId: string): void {
  const toolCallId = state.permissions.get(requestId);
  state.permissions.delete(requestId);
  const card = toolCallId ? state.cards.get(toolCallId) : undefined;
  if (!card) return;
  clearApproval(card);
  if (card.status === "approval") setStatus(card, "pending");
}

/** What a run that did not end normally says under its answer. */
const STOP_NOTICES: Partial<Record<StopReason, { icon: string; text: string }>> = {
  max_tokens: { icon: "warning", text: "The answer was cut off: the model reached its output token limit." },
  refusal: { icon: "circle-slash", text: "The model refused to answer." },
  max_iterations: { icon: "warning", text: "The run stopped after its maximum number of model calls." },
  output_invalid: { icon: "warning", text: "The answer did not match the requested output schema." },
};

/** The line under a run's answer (live and rebuilt alike): model, tokens, how it ended. */
function runFooter(
  turn: Turn,
  stopReason: StopReason | "error",
  model: string | undefined,
  usage: Usage | undefined,
  error?: string,
): void {
  const parts: string[] = [];
  if (model) parts.push(model);
  if (usage) {
    parts.push(`${usage.inputTokens.toLocaleString()} in · ${usage.outputTokens.toLocaleString()} out tokens`);
    if (typeof usage.cost === "number") parts.push(`$${usage.cost.toFixed(4)}`);
  }
  if (stopReason !== "end_turn") parts.push(stopReason.replace("_", " "));
  turn.footer.replaceChildren();
  if (error) {
    const node = el("div", "notice error");
    node.append(icon("error"), el("span", "", error));
    turn.footer.append(node);
  }
  const notice = stopReason === "error" ? undefined : STOP_NOTICES[stopReason];
  if (notice) {
    const node = el("div", `notice warning stop-${stopReason}`);
    node.append(icon(notice.icon), el("span", "", notice.text));
    turn.footer.append(node);
  }
  if (parts.length > 0) {
    const meta = el("div", "meta");
    meta.append(icon("info"), el("span", "", parts.join(" · ")));
    turn.footer.append(meta);
  }
  turn.node.dataset.stopReason = stopReason;
}

function turnFinished(message: Extract<ToWebview, { type: "turnFinished" }>): void {
  setRunning(false);
  const turn = state.turn;
  if (!turn) return;
  runFooter(turn, message.stopReason, message.model, message.usage, message.error);
  state.turn = undefined;
}

function showSession(message: Extract<ToWebview, { type: "session" }>): void {
  state.sessionId = message.sessionId;
  state.turn = undefined;
  state.cards.clear();
  state.permissions.clear();
  titleNode.textContent = message.title ?? "New session";
  log.replaceChildren();
  if (message.items.length === 0) log.append(empty);
  for (const item of message.items) replay(item);
  state.turn = undefined;
  setRunning(message.running);
  showPlan(message.plan ?? []);
  scrollToEnd();
}

const PLAN_ICONS: Record<PlanEntry["status"], string> = {
  pending: "circle-large-outline",
  in_progress: "arrow-circle-right",
  completed: "pass-filled",
};

/** The session's plan as a checklist above the prompt (hidden when there is none). */
function showPlan(entries: PlanEntry[]): void {
  const done = entries.filter((entry) => entry.status === "completed").length;
  const heading = el("div", "plan-heading");
  heading.append(icon("checklist"), el("span", "", `Plan · ${done}/${entries.length} done`));
  const list = el("ol", "plan-entries");
  for (const entry of entries) {
    const item = el("li", `plan-entry ${entry.status}`);
    item.dataset.status = entry.status;
    item.append(icon(PLAN_ICONS[entry.status]), el("span", "plan-content", entry.content));
    if (entry.priority === "high") item.append(el("span", "plan-priority", "high"));
    list.append(item);
  }
  planPanel.replaceChildren(heading, list);
  planPanel.classList.toggle("hidden", entries.length === 0);
}

function replay(item: TranscriptItem): void {
  if (item.type === "user") {
    const turn = newTurn(item.text, item.context ?? [], item.messageId);
    if (item.files) offerRestore(turn, item.files);
    return;
  }
  const turn = state.turn ?? newTurn("", []);
  if (item.type === "assistant") {
    const block = assistantBlock(turn, `stored-${turn.texts.size}`);
    block.text = item.text;
    renderMarkdown(block.node, item.text);
    if (item.cancelled) markCancelled(block.node);
    return;
  }
  if (item.type === "runEnd") {
    runFooter(turn, item.stopReason, item.model, item.usage);
    return;
  }
  const card = toolCard(turn.node, turn.footer, item.toolCallId, item.title, item.toolKind, item.name);
  setStatus(card, item.status === "pending" ? "cancelled" : item.status);
  // As the live card: an edit's diff, else the output (an error's unfolded).
  if (item.status === "completed" && item.diff) setOutput(card, item.diff, "Diff", "diff");
  else if (item.status === "failed") setOutput(card, item.output ?? "failed", "Error", undefined, true);
  else if (item.output && item.status === "completed") setOutput(card, item.output, "Output");
}

function chip(item: ContextItem, index?: number): HTMLElement {
  const node = el("span", "chip");
  node.title = item.file;
  node.append(icon(item.lines ? "list-selection" : "file"), el("span", "", item.label));
  if (index !== undefined) {
    const remove = iconButton(`Remove ${item.label}`, "close", () => post({ type: "detach", index }));
    node.append(remove);
  }
  return node;
}

function showContext(items: ContextItem[]): void {
  state.context = items;
  chips.replaceChildren(...items.map((item, index) => chip(item, index)));
}

function toggleSessions(show = !state.sessionsShown): void {
  state.sessionsShown = show;
  sessionsPanel.classList.toggle("hidden", !show);
  if (show) post({ type: "listSessions" });
}

function showSessions(sessions: SessionSummary[], currentId?: string): void {
  const heading = el("div", "sessions-heading");
  heading.append(el("span", "", "Sessions"), iconButton("Close", "close", () => toggleSessions(false)));
  const list = el("ul", "session-list");
  for (const session of sessions) {
    const item = el("li", "session-item");
    item.dataset.sessionId = session.sessionId;
    if (session.sessionId === currentId) item.classList.add("current");
    const open = el("button", "session-open");
    open.type = "button";
    open.title = `Open ${session.title}`;
    const when = `${relativeTime(session.updatedAt)} · ${session.messageCount} messages${session.running ? " · running" : ""}`;
    open.append(
      icon(session.parentSessionId ? "repo-forked" : "comment-discussion"),
      el("span", "session-name", session.title),
      el("span", "session-when", when),
    );
    open.addEventListener("click", () => {
      toggleSessions(false);
      post({ type: "switchSession", sessionId: session.sessionId });
    });
    const actions = el("span", "session-actions");
    actions.append(
      iconButton("Fork", "repo-forked", () => post({ type: "forkSession", sessionId: session.sessionId })),
      iconButton("Delete", "trash", () => post({ type: "deleteSession", sessionId: session.sessionId })),
    );
    item.append(open, actions);
    list.append(item);
  }
  if (sessions.length === 0) list.append(el("li", "session-none", "No sessions yet."));
  sessionsPanel.replaceChildren(heading, list);
}

function showError(message: string): void {
  const error = el("div", "notice error");
  error.append(icon("error"), el("span", "", message));
  if (state.turn) state.turn.node.insertBefore(error, state.turn.footer);
  else {
    empty.remove();
    log.append(error);
  }
  scrollToEnd();
}

function receive(message: ToWebview): void {
  switch (message.type) {
    case "session":
      showSession(message);
      break;
    case "sessions":
      showSessions(message.sessions, message.currentId);
      break;
    case "context":
      showContext(message.items);
      break;
    case "turnStarted":
      state.sessionId = message.sessionId;
      titleNode.textContent = message.title;
      newTurn(message.prompt, message.context);
      setRunning(true);
      break;
    case "progress":
      progress(message.event);
      break;
    case "turnFinished":
      turnFinished(message);
      break;
    case "permission":
      permission(message);
      break;
    case "permissionClosed":
      permissionClosed(message.requestId);
      break;
    case "error":
      showError(message.message);
      break;
    default:
      break;
  }
}

buildPage();
window.addEventListener("message", (event: MessageEvent<ToWebview>) => receive(event.data));
post({ type: "ready" });
input.focus();
