/**
 * The chat view's script, running inside the webview (a browser, no Node, no `vscode`).
 *
 * It draws what the extension sends (`ToWebview`) and reports what the user does (`FromWebview`);
 * it holds no connection of its own. The DOM is built with `textContent` and Markdown rendered
 * with HTML disabled, so nothing the model or a tool writes becomes markup.
 */
import hljs from "highlight.js/lib/common";
import MarkdownIt from "markdown-it";

import {
  MODES,
  type ContextItem,
  type FromWebview,
  type PermissionOutcome,
  type PlanEntry,
  type ProgressEvent,
  type SessionMode,
  type SessionSummary,
  type StopReason,
  type SubagentOrigin,
  type SymbolMention,
  type ToWebview,
  type ToolKind,
  type TranscriptItem,
  type Usage,
} from "../messages";
import { relativeTime } from "../relative-time";

declare function acquireVsCodeApi(): { postMessage(message: unknown): void };

const vscode = acquireVsCodeApi();
const post = (message: FromWebview): void => vscode.postMessage(message);

const markdown: MarkdownIt = new MarkdownIt({
  html: false,
  linkify: true,
  breaks: false,
  highlight: (code: string, language: string, attrs: string): string => {
    const fence = fenceInfo(language, attrs);
    const lang = fence.language && hljs.getLanguage(fence.language) ? fence.language : undefined;
    const html = lang ? hljs.highlight(code, { language: lang }).value : hljs.highlightAuto(code).value;
    const path = fence.path ? ` data-path="${markdown.utils.escapeHtml(fence.path)}"` : "";
    return `<pre class="hljs"${path}><code>${html}</code></pre>`;
  },
});
/** What looks like a file path: `src/app.py`, `Makefile.am`, `./a/b` (no spaces, no scheme). */
const PATH = /^(?![a-z]+:\/\/)[\w.\-/]*[\w-]\.[\w]+$|^(?![a-z]+:\/\/)[\w.\-]+\/[\w.\-/]+$/i;

/**
 * A fence's language and the file it names: ```` ```py src/app.py ````, ```` ```py:src/app.py ````, or
 * a path alone (```` ```src/app.py ````).
 */
function fenceInfo(language: string, attrs: string): { language?: string; path?: string } {
  const named = attrs.trim().split(/\s+/)[0] ?? "";
  if (named && PATH.test(named)) return { language, path: named };
  const colon = language.indexOf(":");
  if (colon > 0 && PATH.test(language.slice(colon + 1))) return { language: language.slice(0, colon), path: language.slice(colon + 1) };
  if (language && !hljs.getLanguage(language) && PATH.test(language)) {
    return { language: language.split(".").pop(), path: language };
  }
  return { language };
}

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
const commandMenu = el("ul", "command-menu hidden");
commandMenu.setAttribute("role", "listbox");
commandMenu.setAttribute("aria-label", "Commands");
const modePicker = el("select", "mode-picker");
modePicker.title = "The session's mode";
modePicker.setAttribute("aria-label", "Mode");
const modelButton = button("Model", "hubot", "chip-button model-picker", () => post({ type: "pickModel" }));
const jumpButton = button("Latest", "arrow-down", "secondary jump-latest hidden", () => scrollToEnd(true));

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
    el("p", "hint", "Enter sends, Shift+Enter starts a new line. / lists commands, @ attaches a file or a symbol; or attach the selection or the current file."),
  );
  input.placeholder = "Ask tether… (Enter to send, Shift+Enter for a new line)";
  input.rows = 3;
  input.setAttribute("aria-label", "Prompt");
  input.addEventListener("input", () => updateCommandMenu());
  input.addEventListener("keydown", (event) => {
    if (commandKey(event)) {
      event.preventDefault();
      return;
    }
    if (event.key === "Escape" && state.running) {
      event.preventDefault();
      post({ type: "stop" });
      return;
    }
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  // Two groups: what goes with the prompt, and how it runs (mode, model, Send); a narrow view
  // puts the second on a line of its own.
  const attachments = el("div", "composer-group");
  attachments.append(
    button("Selection", "list-selection", "chip-button attach-selection", () =>
      post({ type: "attach", what: "selection" }),
    ),
    button("Current file", "file-add", "chip-button attach-file", () => post({ type: "attach", what: "file" })),
  );
  const runs = el("div", "composer-group run-group");
  runs.append(modePicker, modelButton, stopButton, sendButton);
  const tools = el("div", "composer-tools");
  tools.append(attachments, runs);
  for (const { mode, label, detail } of MODES) {
    const option = el("option", "", label);
    option.value = mode;
    option.title = detail;
    modePicker.append(option);
  }
  modePicker.addEventListener("change", () => post({ type: "setMode", mode: modePicker.value as SessionMode }));
  composer.append(commandMenu, chips, input, tools);
  log.append(empty);
  planPanel.setAttribute("aria-label", "Plan");
  log.addEventListener("scroll", () => noteScroll());
  root.append(header, sessionsPanel, log, jumpButton, planPanel, composer);
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
  /** messageId → its reasoning (`thought_delta`), folded. */
  thoughts: Map<string, { node: HTMLElement; text: string }>;
  /** The answer's "tether" header is drawn once per turn, not once per model call. */
  headed?: boolean;
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
  /** requestId → the card that asks it. */
  permissions: Map<string, Card>;
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

/**
 * Whether the view follows the conversation: true while the user is at the bottom of the log. A
 * user who scrolls up to read is left there while the answer streams on (the Latest button takes
 * them back down); sending a prompt follows again.
 */
let following = true;
/** How far from the bottom (px) still counts as at the bottom. */
const BOTTOM_SLACK = 40;

function atBottom(): boolean {
  return log.scrollHeight - log.scrollTop - log.clientHeight <= BOTTOM_SLACK;
}

/** Where the user scrolled to decides whether the view follows (and whether Latest is offered). */
function noteScroll(): void {
  following = atBottom();
  jumpButton.classList.toggle("hidden", following);
}

/** Keep the newest part in view, if the user follows the conversation (or `force`). */
function scrollToEnd(force = false): void {
  if (!force && !following) return;
  following = true;
  jumpButton.classList.add("hidden");
  log.scrollTop = log.scrollHeight;
}

// -- completion: `/` commands, `@` files ---------------------------------------------------

type Command = Extract<ToWebview, { type: "commands" }>["commands"][number];

/** The session's commands (`session/commands`), asked once per session when `/` is first typed. */
const commands: { list?: Command[]; asked: boolean } = { asked: false };

/** A choice of the completion menu. */
interface Choice {
  name: string;
  /** A codicon shown before the label (a symbol's kind). */
  icon?: string;
  label: string;
  hint?: string;
  description?: string;
  pick(): void;
}

const menu: { shown: Choice[]; active: number } = { shown: [], active: 0 };

/** The `@` word being typed (at the end of the prompt) and the files last offered for it. */
const mentions: { query?: string } = {};

function forgetCommands(): void {
  commands.list = undefined;
  commands.asked = false;
  hideCommandMenu();
}

/** What the prompt's end asks to complete: `/name` (the whole prompt) or an `@file` word. */
function updateCommandMenu(): void {
  const typed = /^\/(\S*)$/.exec(input.value);
  if (typed) return offerCommands(typed[1]);
  const mention = /(?:^|\s)@([^\s@]*)$/.exec(input.value);
  if (mention) {
    if (mention[1] !== mentions.query) {
      mentions.query = mention[1];
      hideCommandMenu(); // until the files for the word as it is now arrive
      post({ type: "mentions", query: mention[1] });
    }
    return;
  }
  mentions.query = undefined;
  hideCommandMenu();
}

function offerCommands(prefix: string): void {
  if (!commands.list) {
    if (!commands.asked) post({ type: "commands" });
    commands.asked = true;
    return;
  }
  const wanted = prefix.toLowerCase();
  showMenu(
    commands.list
      .filter((command) => command.name.toLowerCase().startsWith(wanted))
      .map((command) => ({
        name: command.name,
        label: `/${command.name}`,
        hint: command.argumentHint,
        description: command.description,
        pick: () => replacePrompt(/^\/\S*$/, `/${command.name} `),
      })),
  );
}

/** The files and symbols the extension found for the `@` word being typed. */
function offerMentions(query: string, files: string[], symbols: SymbolMention[]): void {
  if (query !== mentions.query) return; // typed on meanwhile: a newer answer comes
  const fileChoices: Choice[] = files.map((file) => ({
    name: file,
    icon: "file",
    label: `@${file}`,
    pick: () => {
      replacePrompt(/@[^\s@]*$/, `@${file} `);
      post({ type: "attachFile", path: file });
    },
  }));
  const symbolChoices: Choice[] = symbols.map((symbol) => ({
    name: `${symbol.file}#${symbol.name}`,
    icon: `symbol-${symbol.kind}`,
    label: `@${symbol.name}`,
    hint: symbol.container,
    description: `${symbol.file}:${symbol.lines[0]}`,
    pick: () => {
      replacePrompt(/@[^\s@]*$/, `@${symbol.name} `);
      post({ type: "attachSymbol", symbol });
    },
  }));
  showMenu([...fileChoices, ...symbolChoices]);
}

function replacePrompt(pattern: RegExp, text: string): void {
  input.value = input.value.replace(pattern, text);
  hideCommandMenu();
  mentions.query = undefined;
  input.focus();
  input.setSelectionRange(input.value.length, input.value.length);
}

function showMenu(choices: Choice[]): void {
  menu.shown = choices;
  menu.active = 0;
  if (choices.length === 0) return hideCommandMenu();
  drawCommandMenu();
}

function drawCommandMenu(): void {
  commandMenu.replaceChildren(
    ...menu.shown.map((choice, index) => {
      const item = el("li", index === menu.active ? "command active" : "command");
      item.setAttribute("role", "option");
      item.setAttribute("aria-selected", String(index === menu.active));
      item.dataset.name = choice.name;
      if (choice.icon) item.append(icon(choice.icon, "command-icon"));
      item.append(el("span", "command-name", choice.label));
      if (choice.hint) item.append(el("span", "command-hint", choice.hint));
      if (choice.description) item.append(el("span", "command-description", choice.description));
      item.addEventListener("mousedown", (event) => {
        event.preventDefault(); // keep the focus in the prompt
        choice.pick();
      });
      return item;
    }),
  );
  commandMenu.classList.remove("hidden");
}

function hideCommandMenu(): void {
  commandMenu.classList.add("hidden");
  menu.shown = [];
}

/** The keys of the open menu: arrows move, Tab or Enter completes, Escape closes. Whether it took the key. */
function commandKey(event: KeyboardEvent): boolean {
  if (menu.shown.length === 0 || event.isComposing) return false;
  const count = menu.shown.length;
  switch (event.key) {
    case "ArrowDown":
    case "ArrowUp":
      menu.active = (menu.active + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
      drawCommandMenu();
      return true;
    case "Tab":
    case "Enter":
      menu.shown[menu.active].pick();
      return true;
    case "Escape":
      hideCommandMenu();
      return true;
    default:
      return false;
  }
}

// -- rendering -------------------------------------------------------------------------------

function renderMarkdown(node: HTMLElement, text: string): void {
  node.innerHTML = markdown.render(text);
  for (const pre of node.querySelectorAll<HTMLElement>("pre.hljs")) decorateCodeBlock(pre);
}

/**
 * A code block of an answer gets Copy and Insert (at the cursor of the editor), which post its text
 * to the extension; the block scrolls sideways rather than being cut at the view's edge.
 */
function decorateCodeBlock(pre: HTMLElement): void {
  const block = el("div", "code-block");
  const bar = el("div", "code-actions");
  const code = (): string => (pre.textContent ?? "").replace(/\n$/, "");
  bar.append(
    iconButton("Copy", "copy", () => {
      post({ type: "copy", text: code() });
      const copied = bar.querySelector(".copy-done") ?? el("span", "copy-done", "Copied");
      bar.prepend(copied);
    }),
    iconButton("Insert at cursor", "insert", () => post({ type: "insert", text: code() })),
  );
  bar.children[bar.children.length - 2]?.classList.add("copy");
  bar.lastElementChild?.classList.add("insert");
  const path = pre.dataset.path ?? mentionedPath(pre);
  const apply = iconButton(path ? `Apply to ${path}` : "Apply to the active editor", "diff", () =>
    post({ type: "apply", text: code(), path }),
  );
  apply.classList.add("apply");
  if (path) apply.dataset.path = path;
  bar.append(apply);
  pre.replaceWith(block);
  block.append(bar, pre);
}

/**
 * The file the text just before a code block names in code at its very end ("In `src/app.py`:"),
 * which the block is then applied to.
 */
function mentionedPath(pre: HTMLElement): string | undefined {
  const before = pre.previousElementSibling;
  if (!(before instanceof HTMLParagraphElement)) return undefined;
  const codes = before.querySelectorAll("code");
  const last = codes[codes.length - 1]?.textContent?.trim();
  if (!last || !PATH.test(last)) return undefined;
  const text = (before.textContent ?? "").trimEnd().replace(/[:.]$/, "").trimEnd();
  return text.endsWith(last) ? last : undefined;
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
  const turn: Turn = { node, user, texts: new Map(), thoughts: new Map(), cards: new Map(), footer };
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

/** The element of one model call's answer (its reasoning, then its text), made on first use. */
function assistantMessage(turn: Turn, messageId: string): HTMLElement {
  const existing = turn.node.querySelector<HTMLElement>(`.message.assistant[data-message-id="${CSS.escape(messageId)}"]`);
  if (existing) return existing;
  const message = el("div", "message assistant");
  message.dataset.messageId = messageId;
  if (!turn.headed) {
    const who = el("div", "who");
    who.append(icon("sparkle"), el("span", "", "tether"));
    message.append(who);
    turn.headed = true;
  }
  turn.node.insertBefore(message, turn.footer);
  return message;
}

function assistantBlock(turn: Turn, messageId: string): { node: HTMLElement; text: string } {
  let block = turn.texts.get(messageId);
  if (!block) {
    const node = el("div", "markdown");
    assistantMessage(turn, messageId).append(node);
    block = { node, text: "" };
    turn.texts.set(messageId, block);
  }
  return block;
}

/** The reasoning of a model call: folded under "Thinking…" while it streams, "Reasoning" after. */
function reasoningBlock(turn: Turn, messageId: string): { node: HTMLElement; text: string } {
  let block = turn.thoughts.get(messageId);
  if (!block) {
    const details = el("details", "reasoning streaming");
    const summary = el("summary");
    summary.append(icon("chevron-right", "twisty"), icon("lightbulb"), el("span", "reasoning-label", "Thinking…"));
    const node = el("div", "reasoning-text");
    details.append(summary, node);
    const message = assistantMessage(turn, messageId);
    message.insertBefore(details, message.querySelector(".markdown"));
    block = { node, text: "" };
    turn.thoughts.set(messageId, block);
  }
  return block;
}

/** Reasoning that stopped streaming (its answer began, or the run ended) is labelled as such. */
function settleReasoning(turn: Turn): void {
  for (const details of turn.node.querySelectorAll<HTMLElement>("details.reasoning.streaming")) {
    details.classList.remove("streaming");
    const label = details.querySelector(".reasoning-label");
    if (label) label.textContent = "Reasoning";
  }
}

/** "Working…" at the end of a running turn while nothing streams: the model is thinking. */
function showWorking(turn: Turn, label = "Working…"): void {
  let node = turn.node.querySelector<HTMLElement>(".working");
  if (!node) {
    node = el("div", "working");
    node.setAttribute("role", "status");
  }
  node.replaceChildren(icon("loading", "codicon-modifier-spin"), el("span", "", label));
  turn.node.insertBefore(node, turn.footer);
  scrollToEnd();
}

function hideWorking(turn: Turn): void {
  turn.node.querySelector(".working")?.remove();
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
  register = true,
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
  if (register) state.cards.set(toolCallId, card);
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

/** A call's card after its `tool_call_update`: status, progress lines, output or diff or error. */
function updateCard(card: Card, event: Extract<ProgressEvent, { kind: "tool_call_update" }>): void {
  clearApproval(card);
  setStatus(card, event.status);
  if (event.progress) {
    let lines = card.body.querySelector<HTMLElement>(":scope > .tool-progress");
    if (!lines) {
      lines = el("pre", "tool-progress");
      card.body.prepend(lines);
    }
    lines.textContent = `${lines.textContent ?? ""}${event.progress}\n`;
  }
  if (event.status === "completed") {
    card.body.querySelector(":scope > .proposal")?.remove();
    if (event.diff) setOutput(card, event.diff, "Diff", "diff");
    else if (event.result) setOutput(card, event.result, "Output");
  } else if (event.status === "failed") {
    setOutput(card, event.error ?? event.result ?? "failed", "Error", undefined, true);
  }
}

// -- sub-agents: a `task` call's child run, nested in the call's card -------------------------

interface Subagent {
  node: HTMLElement;
  log: HTMLElement;
  /** messageId → its text block. */
  texts: Map<string, { node: HTMLElement; text: string }>;
  /** toolCallId → the card of one of its calls. */
  cards: Map<string, Card>;
}

/** runId → the sub-agent shown for it. */
const subagents = new Map<string, Subagent>();

/** The card of the `task` call that started a sub-agent: the view's run's, or a sub-agent's. */
function parentCard(origin: SubagentOrigin): Card | undefined {
  return subagents.get(origin.parentRunId)?.cards.get(origin.parentToolCallId) ?? state.cards.get(origin.parentToolCallId);
}

/** The box of a sub-agent under its `task` call, with Open (its session), made on its first event. */
function subagentBox(origin: SubagentOrigin): Subagent | undefined {
  const known = subagents.get(origin.runId);
  if (known) return known;
  const card = parentCard(origin);
  if (!card) return undefined;
  const node = el("div", "subagent");
  node.dataset.sessionId = origin.sessionId;
  node.dataset.status = "in_progress";
  const head = el("div", "subagent-head");
  const open = button("Open", "go-to-file", "secondary subagent-open", () =>
    post({ type: "openSession", sessionId: origin.sessionId }),
  );
  open.title = "Open the sub-agent's session";
  head.append(icon("hubot"), el("span", "subagent-label", "Sub-agent"), open);
  const log = el("div", "subagent-log");
  node.append(head, log);
  // Above the call's result (the sub-agent's final answer), which comes when it ends.
  card.body.insertBefore(node, card.body.querySelector(":scope > .tool-output"));
  const subagent: Subagent = { node, log, texts: new Map(), cards: new Map() };
  subagents.set(origin.runId, subagent);
  return subagent;
}

/** A sub-agent's event, drawn in its box: its streamed text and its calls; the rest is its own. */
function subagentProgress(event: ProgressEvent, origin: SubagentOrigin): void {
  const box = subagentBox(origin);
  if (!box) return;
  switch (event.kind) {
    case "message_delta": {
      let block = box.texts.get(event.messageId);
      if (!block) {
        block = { node: el("div", "subagent-text markdown"), text: "" };
        box.texts.set(event.messageId, block);
        box.log.append(block.node);
      }
      block.text += event.text;
      scheduleRender(block);
      break;
    }
    case "tool_call": {
      const card = toolCard(box.log, null, event.toolCallId, event.title ?? event.name, event.toolKind, event.name, false);
      card.node.classList.add("sub");
      box.cards.set(event.toolCallId, card);
      break;
    }
    case "tool_call_update": {
      const card = box.cards.get(event.toolCallId);
      if (card) updateCard(card, event);
      break;
    }
    case "run_finished":
      box.node.dataset.status = event.stopReason;
      for (const card of box.cards.values()) {
        if (card.status === "pending" || card.status === "approval" || card.status === "in_progress") setStatus(card, "cancelled");
      }
      break;
    default:
      break;
  }
  scrollToEnd();
}

function progress(event: ProgressEvent): void {
  const turn = state.turn ?? newTurn("", []);
  switch (event.kind) {
    case "run_started":
      setRunning(true);
      if (!turn.messageId) setPromptId(turn, event.userMessageId);
      showWorking(turn);
      break;
    case "checkpoint":
      offerRestore(turn, event.files);
      break;
    case "iteration_started":
      turn.streaming = undefined;
      showWorking(turn);
      break;
    case "thought_delta": {
      const block = reasoningBlock(turn, event.messageId);
      block.text += event.text;
      block.node.textContent = block.text;
      showWorking(turn, "Thinking…");
      break;
    }
    case "message_delta": {
      hideWorking(turn);
      settleReasoning(turn);
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
      hideWorking(turn);
      settleReasoning(turn);
      scrollToEnd();
      break;
    }
    case "tool_call_update": {
      const card = state.cards.get(event.toolCallId);
      if (card) updateCard(card, event);
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
      hideWorking(turn);
      settleReasoning(turn);
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
  const badge = el("span", "badge", "cancelled");
  // The answer's header is on its first model call only: a later one carries the badge itself.
  const who = message.querySelector(".who");
  if (who) who.append(badge);
  else message.prepend(badge);
}

function clearApproval(card: Card): void {
  card.actions.replaceChildren();
  card.node.classList.remove("asking");
}

/** The card a question is asked in: its call's (in the sub-agent's box for a sub-agent's), made if missing. */
function askingCard(message: Extract<ToWebview, { type: "permission" }>): Card {
  const box = message.subagentRunId ? subagents.get(message.subagentRunId) : undefined;
  const known = (box ? box.cards : state.cards).get(message.toolCallId);
  if (known) return known;
  const { toolCallId, title, toolKind } = message;
  if (box) {
    const card = toolCard(box.log, null, toolCallId, title, toolKind, title, false);
    card.node.classList.add("sub");
    box.cards.set(toolCallId, card);
    return card;
  }
  const turn = state.turn ?? newTurn("", []);
  return toolCard(turn.node, turn.footer, toolCallId, title, toolKind, title);
}

function permission(message: Extract<ToWebview, { type: "permission" }>): void {
  const card = askingCard(message);
  state.permissions.set(message.requestId, card);
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
  const card = state.permissions.get(requestId);
  state.permissions.delete(requestId);
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
    const retry = button("Retry", "refresh", "secondary retry", () => {
      retry.disabled = true;
      post({ type: "retry" });
    });
    node.append(icon("error"), el("span", "", error), retry);
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
  hideWorking(turn);
  settleReasoning(turn);
  runFooter(turn, message.stopReason, message.model, message.usage, message.error);
  // An error ends the log: it is brought into view wherever the user had scrolled to.
  scrollToEnd(message.error !== undefined);
  state.turn = undefined;
}

function showSession(message: Extract<ToWebview, { type: "session" }>): void {
  if (state.sessionId !== message.sessionId) forgetCommands();
  state.sessionId = message.sessionId;
  state.turn = undefined;
  state.cards.clear();
  subagents.clear();
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
    // Each stored model call is its own message element, as each live one was.
    const key = `stored-${turn.node.querySelectorAll(".message.assistant").length}`;
    if (item.reasoning) {
      const thought = reasoningBlock(turn, key);
      thought.text = item.reasoning;
      thought.node.textContent = item.reasoning;
      settleReasoning(turn);
    }
    if (!item.text && !item.cancelled) return;
    const block = assistantBlock(turn, key);
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
  const child = item.childSessionId;
  if (child) {
    const open = button("Open sub-agent", "go-to-file", "secondary subagent-open", () => post({ type: "openSession", sessionId: child }));
    open.title = "Open the sub-agent's session";
    card.actions.append(open);
  }
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

/** The session's mode in the picker, its model on the button beside it. */
function showConfig(mode: SessionMode, model: string | undefined): void {
  modePicker.value = mode;
  const entry = MODES.find((item) => item.mode === mode);
  modePicker.title = entry ? `Mode: ${entry.detail}` : "The session's mode";
  const label = modelButton.querySelector(".label");
  if (label) label.textContent = model ?? "Model";
  modelButton.title = model ? `Model: ${model} (click to change it)` : "Set the model";
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

/** The session list's search: what it is filtered by, kept while the list is refreshed. */
const sessionSearch = el("input", "session-search");
sessionSearch.type = "search";
sessionSearch.placeholder = "Search sessions";
sessionSearch.setAttribute("aria-label", "Search sessions");
sessionSearch.addEventListener("input", () => filterSessions());

/** Hide the listed sessions whose title does not contain every word searched (case aside). */
function filterSessions(): void {
  const words = sessionSearch.value.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  for (const item of sessionsPanel.querySelectorAll<HTMLElement>(".session-item")) {
    const title = (item.querySelector(".session-name")?.textContent ?? "").toLowerCase();
    const match = words.every((word) => title.includes(word));
    item.classList.toggle("hidden", !match);
    if (match) shown += 1;
  }
  sessionsPanel.querySelector(".session-nomatch")?.classList.toggle("hidden", shown > 0 || words.length === 0);
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
  list.append(el("li", "session-nomatch hidden", "No session matches."));
  sessionsPanel.replaceChildren(heading, sessionSearch, list);
  filterSessions();
}

function showError(message: string, level: "error" | "warning" | "info" = "error"): void {
  const error = el("div", `notice ${level}`);
  error.append(icon(level === "info" ? "info" : level), el("span", "", message));
  if (state.turn) state.turn.node.insertBefore(error, state.turn.footer);
  else {
    empty.remove();
    log.append(error);
  }
  error.scrollIntoView({ block: "nearest" });
  noteScroll();
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
      if (state.sessionId && state.sessionId !== message.sessionId) {
        // The session shown could not go on (it was not resumed): what follows is another one.
        log.append(el("div", "session-divider", "New session"));
      }
      state.sessionId = message.sessionId;
      following = true;
      titleNode.textContent = message.title;
      newTurn(message.prompt, message.context);
      setRunning(true);
      break;
    case "progress":
      if (message.subagent) subagentProgress(message.event, message.subagent);
      else progress(message.event);
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
    case "notice":
      showError(message.message, message.level);
      break;
    case "focus":
      input.focus();
      break;
    case "commands":
      commands.list = message.commands;
      updateCommandMenu();
      break;
    case "mentions":
      offerMentions(message.query, message.files, message.symbols);
      break;
    case "sessionConfig":
      showConfig(message.mode, message.model);
      break;
    default:
      break;
  }
}

buildPage();
window.addEventListener("message", (event: MessageEvent<ToWebview>) => receive(event.data));
post({ type: "ready" });
input.focus();
