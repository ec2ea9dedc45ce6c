// `tether serve` driven as a language server by Microsoft's protocol library
// (vscode-languageserver-protocol over vscode-jsonrpc), with node --test: a "Fix" code action runs
// a turn (progress, the permission question in window/showMessageRequest, the edit through
// workspace/applyEdit, the transcript in window/showDocument), and Cancel on the progress token
// stops a turn. Run by `make lsp-node-test` (and `make test`).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import {
  ApplyWorkspaceEditRequest,
  CodeActionRequest,
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  ExitNotification,
  InitializedNotification,
  InitializeRequest,
  LogMessageNotification,
  ShowDocumentRequest,
  ShowMessageRequest,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
  WorkDoneProgressCancelNotification,
  WorkDoneProgressCreateRequest,
  createProtocolConnection,
} from "vscode-languageserver-protocol/node.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const PYTHON = process.env.TETHER_PYTHON ?? join(REPO, ".venv", "bin", "python");
const WAIT_MS = 20_000;

/** A project with app.py, a running `tether serve` playing `turns`, and an initialized client
 * that answers the server's requests as an editor would and records them. */
async function start(turns) {
  const base = mkdtempSync(join(tmpdir(), "tether-lsp-node-"));
  const project = join(base, "project");
  mkdirSync(project);
  writeFileSync(join(project, "app.py"), "import os\nx = 1\n");
  const script = join(base, "script.json");
  writeFileSync(script, JSON.stringify(turns));
  const child = spawn(PYTHON, ["-m", "tether", "serve"], {
    cwd: project,
    env: { ...process.env, XDG_DATA_HOME: join(base, "data"), TETHER_LOG_LEVEL: "warning" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const connection = createProtocolConnection(
    new StreamMessageReader(child.stdout),
    new StreamMessageWriter(child.stdin),
  );
  const seen = { tokens: [], progress: [], questions: [], edits: [], shown: [], logs: [] };
  connection.onRequest(WorkDoneProgressCreateRequest.type, (params) => {
    seen.tokens.push(params.token);
    return null;
  });
  connection.onNotification("$/progress", (params) => seen.progress.push(params));
  connection.onRequest(ShowMessageRequest.type, (params) => {
    seen.questions.push(params);
    return { title: "Allow" };
  });
  connection.onRequest(ApplyWorkspaceEditRequest.type, (params) => {
    seen.edits.push(params.edit);
    return { applied: true };
  });
  connection.onRequest(ShowDocumentRequest.type, (params) => {
    seen.shown.push(params);
    return { success: true };
  });
  connection.onNotification(LogMessageNotification.type, (params) => seen.logs.push(params));
  connection.listen();
  const options = {
    provider: { type: "scripted", script },
    sessions: { store: "memory" },
  };
  const result = await within(
    connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: pathToFileURL(project).href,
      workspaceFolders: [{ uri: pathToFileURL(project).href, name: "project" }],
      initializationOptions: options,
      capabilities: {
        window: {
          workDoneProgress: true,
          showMessage: { messageActionItem: { additionalPropertiesSupport: false } },
          showDocument: { support: true },
        },
        workspace: { applyEdit: true, workspaceEdit: { documentChanges: true } },
      },
    }),
    "initialize",
  );
  await connection.sendNotification(InitializedNotification.type, {});
  const stop = async () => {
    await within(connection.sendRequest(ShutdownRequest.type), "shutdown");
    await connection.sendNotification(ExitNotification.type);
    await new Promise((done) => child.once("exit", done));
    connection.dispose();
    rmSync(base, { recursive: true, force: true });
  };
  return { base, project, connection, seen, result, stop, stderr: () => stderr };
}

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function until(condition, what) {
  const deadline = Date.now() + WAIT_MS;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}

/** Whether a turn's progress has ended. */
function ended(seen) {
  return seen.progress.some((p) => p.value.kind === "end");
}

/** The text after applying a TextEdit[] (ASCII text: offsets are UTF-16 units). */
function applied(text, edits) {
  const offset = ({ line, character }) => {
    const lines = text.split("\n");
    return lines.slice(0, line).reduce((sum, l) => sum + l.length + 1, 0) + character;
  };
  const sorted = [...edits].sort((a, b) => offset(b.range.start) - offset(a.range.start));
  for (const edit of sorted) {
    text = text.slice(0, offset(edit.range.start)) + edit.newText + text.slice(offset(edit.range.end));
  }
  return text;
}

const FIX = [
  {
    text: "Fixing.",
    toolCalls: [
      { name: "edit_file", arguments: { path: "app.py", oldString: "x = 1", newString: "x = 2" } },
    ],
  },
  { text: "Done: x is 2 now." },
];

test("a Fix code action runs a turn that asks, edits through applyEdit and shows the transcript", async () => {
  const server = await start(FIX);
  try {
    const { connection, seen, project } = server;
    const capabilities = server.result.capabilities;
    assert.deepEqual(capabilities.textDocumentSync, {
      openClose: true,
      change: 2,
      save: { includeText: false },
    });
    assert.deepEqual(capabilities.executeCommandProvider.commands, [
      "tether.ask",
      "tether.cancel",
      "tether.newSession",
      "tether.undo",
    ]);
    const uri = pathToFileURL(join(project, "app.py")).href;
    const buffer = "import os\nx = 1\n";
    await connection.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri, languageId: "python", version: 1, text: buffer },
    });
    const actions = await within(
      connection.sendRequest(CodeActionRequest.type, {
        textDocument: { uri },
        range: { start: { line: 1, character: 0 }, end: { line: 1, character: 5 } },
        context: { diagnostics: [] },
      }),
      "codeAction",
    );
    assert.deepEqual(
      actions.map((a) => a.title),
      ["Ask tether…", "Explain", "Fix"],
    );
    const fix = actions.find((a) => a.title === "Fix");
    const answer = await within(
      connection.sendRequest(ExecuteCommandRequest.type, fix.command),
      "the turn's start",
    );
    assert.deepEqual(Object.keys(answer).sort(), ["runId", "sessionId"]);
    await until(() => seen.shown.length > 0 && ended(seen), "the transcript and the end");
    assert.deepEqual(
      seen.questions.map((q) => [q.message, q.actions.map((a) => a.title)]),
      [["tether wants to: Edit app.py", ["Allow", "Always allow", "Reject"]]],
    );
    assert.equal(seen.edits.length, 1);
    assert.equal(applied(buffer, seen.edits[0].changes[uri]), "import os\nx = 2\n");
    assert.equal(readFileSync(join(project, "app.py"), "utf8"), buffer); // the disk is the editor's to write
    assert.equal(seen.shown.length, 1);
    const shown = fileURLToPath(seen.shown[0].uri);
    assert.ok(shown.endsWith(`transcript-${answer.runId}.md`), shown);
    assert.match(readFileSync(shown, "utf8"), /Fixing\.\n\n- Edit app\.py\n\nDone: x is 2 now\./);
    const kinds = seen.progress.map((p) => p.value.kind);
    assert.equal(kinds[0], "begin");
    assert.equal(kinds.at(-1), "end");
    assert.deepEqual(seen.tokens, [seen.progress[0].token]);
    assert.deepEqual(seen.logs, []);
  } finally {
    await server.stop();
  }
  assert.doesNotMatch(server.stderr(), / (WARNING|ERROR) /);
});

test("tether.ask answers while the model is still at work; Cancel on the progress token stops the turn", async () => {
  // The model would answer after 30 s: the command's answer comes before, and the turn is
  // stopped long before that.
  const server = await start([{ text: "This takes a while.", delay: 30 }]);
  try {
    const { connection, seen } = server;
    const answer = await within(
      connection.sendRequest(ExecuteCommandRequest.type, {
        command: "tether.ask",
        arguments: ["take your time"],
      }),
      "the turn's start",
    );
    assert.deepEqual(Object.keys(answer).sort(), ["runId", "sessionId"]);
    await until(() => seen.progress.length > 0, "progress");
    assert.ok(!ended(seen));
    await connection.sendNotification(WorkDoneProgressCancelNotification.type, {
      token: seen.progress[0].token,
    });
    await until(() => ended(seen) && seen.shown.length > 0, "the cancelled turn");
    const transcript = readFileSync(fileURLToPath(seen.shown[0].uri), "utf8");
    assert.match(transcript, /\*Stopped: cancelled\.\*\n\n$/);
    assert.equal(seen.progress.at(-1).value.kind, "end");
    assert.equal(seen.progress.at(-1).value.message, "cancelled");
  } finally {
    await server.stop();
  }
});
