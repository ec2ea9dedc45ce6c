/**
 * `@` symbols: the workspace's symbols whose name matches what is typed
 * (`vscode.executeWorkspaceSymbolProvider`, whatever language extensions provide them), and the
 * lines of a picked one, attached as context like a selection.
 */
import * as vscode from "vscode";

import type { ContextItem, SymbolMention } from "./messages";

/** At most this many symbols are offered. */
const MAX_SYMBOLS = 10;

/** `vscode.SymbolKind` values (stable numbers of the API) as codicon `symbol-*` names. */
const KINDS: Record<number, string> = {
  0: "file",
  1: "module",
  2: "namespace",
  3: "package",
  4: "class",
  5: "method",
  6: "property",
  7: "field",
  8: "constructor",
  9: "enum",
  10: "interface",
  11: "function",
  12: "variable",
  13: "constant",
  14: "string",
  21: "enum-member",
  22: "struct",
  23: "event",
  24: "operator",
  25: "type-parameter",
};

interface LineRange {
  start: { line: number };
  end: { line: number };
}

/** What a document symbol provider answers: DocumentSymbols (a tree) or SymbolInformation. */
interface DocumentSymbolLike {
  name: string;
  range?: LineRange;
  selectionRange?: LineRange;
  location?: { range: LineRange };
  children?: DocumentSymbolLike[];
}

/** The workspace's symbols whose name contains `query` (the ones in its first folder). */
export async function workspaceSymbols(query: string): Promise<SymbolMention[]> {
  if (!query) return [];
  let found: vscode.SymbolInformation[] | undefined;
  try {
    found = await vscode.commands.executeCommand<vscode.SymbolInformation[]>("vscode.executeWorkspaceSymbolProvider", query);
  } catch {
    return []; // no provider answered: files only
  }
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  const needle = query.toLowerCase();
  const inWorkspace = (found ?? []).filter(
    (symbol) =>
      symbol.name.toLowerCase().includes(needle) &&
      folder !== undefined &&
      symbol.location.uri.toString().startsWith(`${folder.toString()}/`),
  );
  const symbols = await Promise.all(inWorkspace.slice(0, MAX_SYMBOLS).map((symbol) => mention(symbol)));
  return symbols;
}

async function mention(symbol: vscode.SymbolInformation): Promise<SymbolMention> {
  const { uri } = symbol.location;
  // A provider that resolves symbols lazily may leave the range out: its document's symbols tell.
  const range = symbol.location.range as LineRange | undefined;
  const [first, last] = await definitionLines(uri, symbol.name, range);
  return {
    // A Markdown heading's symbol is named as written (`# Demo`): offered as its text.
    name: symbol.name.replace(/^#+\s+/, ""),
    kind: KINDS[symbol.kind] ?? "misc",
    file: vscode.workspace.asRelativePath(uri, false),
    lines: [first + 1, last + 1],
    container: symbol.containerName || undefined,
  };
}

/**
 * The 0-based lines of a symbol's whole definition. Some providers give only its name's range: the
 * document's own symbols then give the definition that starts there.
 */
async function definitionLines(uri: vscode.Uri, name: string, range: LineRange | undefined): Promise<[number, number]> {
  if (range && range.end.line > range.start.line) return [range.start.line, range.end.line];
  let tree: DocumentSymbolLike[] | undefined;
  try {
    tree = await vscode.commands.executeCommand<DocumentSymbolLike[]>("vscode.executeDocumentSymbolProvider", uri);
  } catch {
    tree = undefined;
  }
  const line = range?.start.line;
  const match = findDefinition(tree ?? [], name, line);
  if (!match) return [line ?? 0, line ?? 0];
  return line === undefined ? [match.start.line, match.end.line] : [Math.min(match.start.line, line), Math.max(match.end.line, line)];
}

/** The definition of `name` whose head is on `line` (any line: the first of that name), innermost first. */
function findDefinition(symbols: DocumentSymbolLike[], name: string, line: number | undefined): LineRange | undefined {
  const on = (range: LineRange) => line === undefined || (range.start.line <= line && line <= range.end.line);
  for (const symbol of symbols) {
    const whole = symbol.range ?? symbol.location?.range;
    const head = symbol.selectionRange ?? whole;
    if (!whole || !on(whole)) continue;
    const inner = findDefinition(symbol.children ?? [], name, line);
    if (inner) return inner;
    if (symbol.name === name && head && on(head)) return whole;
  }
  return undefined;
}

/** The symbol's lines of its file, as the context of the next prompt (like a selection). */
export async function symbolContext(symbol: SymbolMention): Promise<ContextItem> {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  if (!folder) throw new Error("Open a folder first: symbols are attached from the workspace.");
  const bytes = await vscode.workspace.fs.readFile(vscode.Uri.joinPath(folder, symbol.file));
  const [first, last] = symbol.lines;
  const text = new TextDecoder().decode(bytes).split("\n").slice(first - 1, last).join("\n");
  return { label: `${symbol.file}:${first}-${last}`, file: symbol.file, lines: [first, last], text };
}
