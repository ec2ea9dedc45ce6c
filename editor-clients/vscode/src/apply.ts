/**
 * A code block's Apply: where it goes and what the file becomes, then the write once the user
 * accepted the diff. The rule, kept simple so that it is predictable (the README says it too):
 *
 * - the file: the one the block names (its fence's info after the language, ```` ```py src/app.py ````,
 *   or the file named in code at the end of the text just before it), else the active editor's;
 * - the part: the active editor's selection when that editor shows the file and has one (the block
 *   is a fragment that replaces it), else the whole file (the block is the file; a new file when
 *   there is none).
 *
 * Nothing is written before the user accepted, and nothing when the file changed since the diff
 * was made.
 */
import * as vscode from "vscode";

/** A code block applied to one file: what it is now, what it becomes. */
export interface ApplyTarget {
  uri: vscode.Uri;
  /** Workspace-relative, as the diff's title and the messages say it. */
  path: string;
  /** The file's text now (empty for a new file). */
  before: string;
  /** The file's text once applied. */
  after: string;
  /** The file does not exist yet. */
  created: boolean;
  /** The selection the block replaces (a fragment); absent: the whole file. */
  range?: vscode.Range;
  /** The open document of the file, edited in place (undoable) rather than written behind it. */
  document?: vscode.TextDocument;
}

/** Where Apply puts `text` (the block, its last newline stripped) and what the file becomes. */
export async function applyTarget(text: string, named?: string): Promise<ApplyTarget> {
  const editor = vscode.window.activeTextEditor ?? vscode.window.visibleTextEditors[0];
  const uri = named ? workspaceUri(named) : editor?.document.uri;
  if (!uri) throw new Error("Open a file first: the code block names no file to apply it to.");
  const shown = editor && sameUri(editor.document.uri, uri) ? editor : undefined;
  const document = openDocument(uri) ?? shown?.document;
  const before = document ? document.getText() : await readText(uri);
  const path = vscode.workspace.asRelativePath(uri, false);
  const selection = shown && !shown.selection.isEmpty ? shown.selection : undefined;
  if (selection && document && before !== undefined) {
    const start = document.offsetAt(selection.start);
    const end = document.offsetAt(selection.end);
    const replaced = before.slice(start, end);
    const fragment = replaced.endsWith("\n") && !text.endsWith("\n") ? `${text}\n` : text;
    const range = new vscode.Range(selection.start, selection.end);
    const after = before.slice(0, start) + fragment + before.slice(end);
    return { uri, path, before, after, created: false, range, document };
  }
  const created = before === undefined;
  const after = text.endsWith("\n") || (before !== undefined && before !== "" && !before.endsWith("\n")) ? text : `${text}\n`;
  return { uri, path, before: before ?? "", after, created, document };
}

/**
 * Write what the user accepted: through the open document when there is one (an edit they can
 * undo, then saved), else to disk. Refused when the file is no longer what the diff showed.
 */
export async function writeTarget(target: ApplyTarget): Promise<void> {
  const document = openDocument(target.uri) ?? target.document;
  const now = document && !document.isClosed ? document.getText() : await readText(target.uri);
  if ((now ?? "") !== target.before || (now === undefined) !== target.created) {
    throw new Error(`${target.path} changed since the diff was made: nothing was written. Apply again to see the change against it.`);
  }
  if (!document || document.isClosed) {
    await vscode.workspace.fs.writeFile(target.uri, new TextEncoder().encode(target.after));
    return;
  }
  const edit = new vscode.WorkspaceEdit();
  const whole = new vscode.Range(document.positionAt(0), document.positionAt(target.before.length));
  edit.replace(document.uri, whole, target.after);
  if (!(await vscode.workspace.applyEdit(edit))) throw new Error(`${target.path} could not be edited: nothing was written.`);
  await document.save();
}

/** A path the block names, inside the workspace's first folder (never outside it). */
function workspaceUri(path: string): vscode.Uri {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  if (!folder) throw new Error("Open a folder first: code blocks are applied to its files.");
  const relative = path.replace(/^\.\//, "");
  if (/^([a-zA-Z]:)?[\\/]/.test(relative) || relative.split(/[\\/]/).includes("..")) {
    throw new Error(`Apply writes only inside the workspace: ${path} is not.`);
  }
  return vscode.Uri.joinPath(folder, relative);
}

function sameUri(a: vscode.Uri, b: vscode.Uri): boolean {
  return a.toString() === b.toString();
}

function openDocument(uri: vscode.Uri): vscode.TextDocument | undefined {
  return vscode.workspace.textDocuments.find((document) => !document.isClosed && sameUri(document.uri, uri));
}

/** The file's text on disk; undefined when there is no such file. */
async function readText(uri: vscode.Uri): Promise<string | undefined> {
  try {
    return new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === "FileNotFound" || code === "ENOENT") return undefined;
    throw error;
  }
}
