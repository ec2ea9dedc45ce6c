/**
 * What the chat view offers around the prompt and the answer, on the extension side: a code
 * block's Apply (a diff first, written only once accepted), `@` symbols (their definition's lines
 * attached), and the view's mode picker (`session/configure {mode}` on the real server).
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { closeChat, openChat, type Extension, FakeWebview } from "./fake-webview";
import { SERVER_COMMAND, within, workspace, type Workspace } from "./helpers";
import * as stub from "./vscode-stub";

stub.install();

/** A document open in an editor: its text, positions as VS Code counts them, and saves. */
function openDocument(uri: stub.Uri, text: string) {
  const offsetAt = (position: stub.Position) => {
    const lines = text.split("\n");
    return lines.slice(0, position.line).reduce((sum, line) => sum + line.length + 1, 0) + position.character;
  };
  const document = {
    uri,
    isClosed: false,
    saved: 0,
    getText: () => text,
    offsetAt,
    positionAt: (offset: number) => {
      const lines = text.slice(0, offset).split("\n");
      return new stub.Position(lines.length - 1, lines.at(-1)?.length ?? 0);
    },
    save: async () => {
      document.saved += 1;
      return true;
    },
    /** What the edit `applyEdit` recorded makes of it. */
    apply(edit: stub.WorkspaceEdit) {
      for (const { range, text: replacement } of edit.replacements) {
        text = text.slice(0, offsetAt(range.start)) + replacement + text.slice(offsetAt(range.end));
      }
    },
  };
  return document;
}

describe("the chat view's Apply, @ symbols and mode picker", { timeout: 120_000 }, () => {
  let ws: Workspace;
  let extension: Extension;
  let webview: FakeWebview;
  const diffs: unknown[][] = [];
  const asked: string[] = [];
  const context = { subscriptions: [] as { dispose(): unknown }[], extensionUri: stub.Uri.file("/ext") };
  const app = () => join(ws.root, "src", "app.py");

  /** The diff editor's two sides, as the content provider gives them. */
  async function diffSides(args: unknown[]): Promise<[string, string, string]> {
    const [left, right, title] = args as [stub.Uri, stub.Uri, string];
    const read = async (uri: stub.Uri) => (await stub.vscode.workspace.openTextDocument(uri)).getText();
    return [await read(left), await read(right), title];
  }

  /** Apply `text` (named `path`), answering the question with `answer`; what the view was sent back. */
  async function apply(text: string, path: string | undefined, answer: string | (() => string)) {
    const from = webview.received.length;
    const shownFrom = stub.shown.info.length;
    const diffsFrom = diffs.length;
    const logFrom = stub.shown.output.length;
    let sides: Promise<[string, string, string]> | undefined;
    stub.ui.info = (message: string) => {
      asked.push(message);
      sides = diffSides(diffs[diffs.length - 1]);
      return typeof answer === "string" ? answer : answer();
    };
    webview.send({ type: "apply", text, path });
    await within(
      // Its outcome is logged: `[chat] apply to PATH: applied|discarded`, or `[chat] apply: <error>`.
      stub.when(() => stub.shown.output.slice(logFrom).some((line) => line.startsWith("[chat] apply"))),
      "the apply",
    );
    stub.ui.info = () => undefined;
    return { diffsShown: diffs.length - diffsFrom, asked: stub.shown.info.slice(shownFrom), sides: await sides, sent: webview.received.slice(from) };
  }

  before(() => {
    ws = workspace();
    stub.setWorkspace(ws.root);
    stub.settings["tether.serverCommand"] = SERVER_COMMAND;
    stub.settings["tether.provider"] = ws.provider([]);
    stub.commands.set("vscode.diff", (...args: unknown[]) => diffs.push(args));
    ({ extension, webview } = openChat(context));
  });

  after(async () => {
    await closeChat(extension, context);
    ws.remove();
  });

  test("Apply shows the file against the block in a diff; Discard writes nothing, Accept writes it", async () => {
    const block = "def main():\n    return 43";
    const discarded = await apply(block, "src/app.py", "Discard");
    assert.equal(discarded.diffsShown, 1);
    assert.deepEqual(discarded.asked, ["Tether: apply the code block to src/app.py?"]);
    assert.deepEqual(discarded.sides, ["def main():\n    return 42\n", `${block}\n`, "src/app.py (current ↔ proposed, Apply)"]);
    assert.equal(readFileSync(app(), "utf8"), "def main():\n    return 42\n");

    await apply(block, "src/app.py", "Accept");
    assert.equal(readFileSync(app(), "utf8"), `${block}\n`);
    assert.match(stub.outputText(), /\[chat\] apply to src\/app\.py: applied/);
  });

  test("Apply makes a new file the block names, and never writes outside the workspace", async () => {
    const created = await apply("print('hi')", "./src/new.py", "Accept");
    assert.deepEqual(created.asked, ["Tether: apply the code block to a new file, src/new.py?"]);
    assert.equal(created.sides?.[2], "src/new.py (new file, Apply)");
    assert.equal(readFileSync(join(ws.root, "src", "new.py"), "utf8"), "print('hi')\n");

    const outside = await apply("x = 1", "../outside.py", "Accept");
    assert.equal(outside.diffsShown, 0);
    assert.deepEqual(outside.sent, [{ type: "error", message: "Apply writes only inside the workspace: ../outside.py is not." }]);
    assert.equal(existsSync(join(ws.root, "..", "outside.py")), false);
  });

  test("Apply to a file changed since its diff was made writes nothing and says so", async () => {
    writeFileSync(app(), "v = 1\n");
    const stale = await apply("v = 2", "src/app.py", () => {
      writeFileSync(app(), "v = 'by hand'\n");
      return "Accept";
    });
    assert.equal(readFileSync(app(), "utf8"), "v = 'by hand'\n");
    assert.equal(stale.sent[0]?.type, "error");
    assert.match((stale.sent[0] as { message: string }).message, /src\/app\.py changed since the diff was made: nothing was written/);
  });

  test("a block that names no file replaces the active editor's selection, through the open document", async () => {
    writeFileSync(app(), "def main():\n    return 42\n");
    const document = openDocument(stub.Uri.file(app()), "def main():\n    return 42\n");
    const selection = Object.assign(new stub.Range(new stub.Position(1, 4), new stub.Position(1, 13)), { isEmpty: false });
    stub.vscode.window.activeTextEditor = { document, selection, selections: [selection] };
    stub.textDocuments.push(document);
    const editsFrom = stub.edits.length;
    try {
      const fragment = await apply("return 7", undefined, "Accept");
      assert.deepEqual(fragment.asked, ["Tether: apply the code block to the selection in src/app.py?"]);
      assert.deepEqual(fragment.sides, ["def main():\n    return 42\n", "def main():\n    return 7\n", "src/app.py (selection replaced, Apply)"]);
      const [edit] = stub.edits.slice(editsFrom);
      assert.ok(edit, "a workspace edit (undoable in the editor)");
      document.apply(edit);
      assert.equal(document.getText(), "def main():\n    return 7\n");
      assert.equal(document.saved, 1);
    } finally {
      stub.vscode.window.activeTextEditor = undefined;
      stub.textDocuments.length = 0;
    }
    const none = await apply("x = 1", undefined, "Accept");
    assert.deepEqual(none.sent, [{ type: "error", message: "Open a file first: the code block names no file to apply it to." }]);
  });

  test("`@` offers the workspace's symbols; a picked one attaches the lines of its definition", async () => {
    writeFileSync(app(), "import os\n\ndef main():\n    return 42\n");
    const at = (line: number) => ({ start: { line }, end: { line } });
    stub.commands.set("vscode.executeWorkspaceSymbolProvider", (query: unknown) => [
      { name: "main", kind: 11, containerName: "", location: { uri: stub.Uri.file(app()), range: at(2) } },
      { name: "main", kind: 11, containerName: "", location: { uri: stub.Uri.file("/elsewhere/lib.py"), range: at(0) } },
      { name: `${String(query)}_not`, kind: 4, containerName: "x", location: { uri: stub.Uri.file(app()), range: at(9) } },
      { name: "## Domain", kind: 14, containerName: "", location: { uri: stub.Uri.file(join(ws.root, "README.md")), range: at(0) } },
    ]);
    // The provider gave the name's line only: the document's symbols give the whole definition.
    stub.commands.set("vscode.executeDocumentSymbolProvider", () => [
      { name: "main", range: { start: { line: 2 }, end: { line: 3 } }, selectionRange: at(2), children: [] },
    ]);
    let from = webview.received.length;
    webview.send({ type: "mentions", query: "mai" });
    const offered = await webview.next("mentions", from);
    assert.deepEqual(offered.symbols, [
      { name: "main", kind: "function", file: "src/app.py", lines: [3, 4] },
      { name: "mai_not", kind: "class", file: "src/app.py", lines: [10, 10], container: "x" },
      { name: "Domain", kind: "string", file: "README.md", lines: [1, 1] },
    ]);
    assert.deepEqual(offered.files, []);
    from = webview.received.length;
    webview.send({ type: "attachSymbol", symbol: offered.symbols[0] });
    const { items } = await webview.next("context", from);
    assert.deepEqual(items, [{ label: "src/app.py:3-4", file: "src/app.py", lines: [3, 4], text: "def main():\n    return 42" }]);
    webview.send({ type: "detach", index: 0 });
    stub.commands.delete("vscode.executeWorkspaceSymbolProvider");
    from = webview.received.length;
    webview.send({ type: "mentions", query: "app" });
    assert.deepEqual((await webview.next("mentions", from)).symbols, [], "no symbol provider: files only");
  });

  test("the view's mode picker sets the session's mode (session/configure); the status bar follows", { timeout: 60_000 }, async () => {
    let from = webview.received.length;
    webview.send({ type: "ready" });
    assert.deepEqual(await webview.next("sessionConfig", from), { type: "sessionConfig", mode: "ask", model: "scripted" });
    from = webview.received.length;
    webview.send({ type: "setMode", mode: "read_only" });
    const config = await webview.next("sessionConfig", from, (message) => message.mode === "read_only");
    assert.equal(config.model, "scripted");
    await within(stub.when(() => stub.statusBarItems.some((item) => item.text === "$(shield) Read only")), "the status bar");
    // The status bar's picker (Tether: Set Mode) moves the view's picker too.
    stub.ui.quickPick = <T>(items: T[]) => items.find((item) => (item as { mode?: string }).mode === "accept_edits");
    from = webview.received.length;
    const session = (await stub.vscode.commands.executeCommand("tether.pickMode")) as { mode?: string };
    assert.equal(session.mode, "accept_edits");
    assert.equal((await webview.next("sessionConfig", from)).mode, "accept_edits");
    // The model button opens the Set Model picker.
    stub.ui.quickPick = <T>(items: T[]) => items.find((item) => (item as { label: string }).label === "Another model…");
    stub.ui.inputBox = () => "other-model";
    from = webview.received.length;
    webview.send({ type: "pickModel" });
    assert.deepEqual(await webview.next("sessionConfig", from, (message) => message.model === "other-model"), {
      type: "sessionConfig",
      mode: "accept_edits",
      model: "other-model",
    });
    stub.ui.quickPick = <T>(items: T[]) => items[0];
    stub.ui.inputBox = () => undefined;
  });
});
