import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  ErrorCodes,
  ResponseError,
  TetherConnection,
  defaultCommand,
  errorCode,
  type PermissionParams,
  type ProgressParams,
} from "../src/rpc";
import { SERVER_COMMAND, call, within, workspace, type Turn, type Workspace } from "./helpers";

async function start(ws: Workspace, turns: Turn[], extra: Partial<Parameters<typeof TetherConnection.start>[0]> = {}) {
  return within(
    TetherConnection.start({
      command: SERVER_COMMAND,
      workspaceFolders: [ws.uri],
      initializationOptions: { provider: ws.provider(turns) },
      ...extra,
    }),
    "initialize",
  );
}

/** Resolves with the first progress event of `kind`. */
function nextEvent(tether: TetherConnection, kind: string): Promise<ProgressParams> {
  return within(
    new Promise<ProgressParams>((resolve) => {
      const listener = tether.onProgress((params) => {
        if (params.event.kind === kind) {
          listener.dispose();
          resolve(params);
        }
      });
    }),
    `progress ${kind}`,
  );
}

describe("TetherConnection against the real server", { timeout: 300_000 }, () => {
  let ws: Workspace;
  before(() => {
    ws = workspace();
  });
  after(() => ws.remove());

  test("initialize reports the served methods", { timeout: 60_000 }, async () => {
    const tether = await start(ws, []);
    try {
      assert.equal(tether.initializeResult?.serverInfo.name, "tether");
      assert.ok(tether.initializeResult?.capabilities.methods?.includes("kernel/run"));
    } finally {
      assert.equal(await within(tether.shutdown(), "shutdown", 15_000), 0);
    }
  });

  test("a run with tool calls streams ordered progress and returns its result", { timeout: 60_000 }, async () => {
    const tether = await start(ws, [
      { text: "Let me look.", toolCalls: [call("c1", "read_file", { path: "README.md" })] },
      { text: "It is a demo project." },
    ]);
    const events: ProgressParams[] = [];
    tether.onProgress((params) => events.push(params));
    try {
      const session = await within(tether.createSession({ title: "demo" }), "session/create");
      assert.equal(session.workspace, ws.uri);
      assert.equal(session.title, "demo");

      const run = tether.run({ sessionId: session.sessionId, prompt: "What is this?" });
      assert.equal(run.sessionId, session.sessionId);
      const result = await within(run.result, "kernel/run");
      assert.equal(result.stopReason, "end_turn");
      assert.equal(result.response, "It is a demo project.");
      assert.equal(result.iterations, 2);
      assert.equal(result.toolCalls.length, 1);
      assert.equal(result.toolCalls[0]?.name, "read_file");
      assert.equal(result.toolCalls[0]?.isError, false);
      assert.match(result.toolCalls[0]?.result ?? "", /A small project/);

      // run_finished is written before the response: every event has arrived.
      const ours = events.filter((e) => e.runId === result.runId);
      assert.deepEqual(
        ours.map((e) => e.seq),
        ours.map((_, i) => i + 1),
      );
      const kinds = ours.map((e) => e.event.kind);
      assert.equal(kinds[0], "run_started");
      assert.equal(kinds.at(-1), "run_finished");
      const statuses = ours.flatMap((e) =>
        e.event.kind === "tool_call"
          ? ["pending"]
          : e.event.kind === "tool_call_update"
            ? [e.event.status]
            : [],
      );
      assert.deepEqual(statuses, ["pending", "in_progress", "completed"]);
      assert.ok(kinds.includes("message_delta"));

      const list = await within(tether.listSessions(), "session/list");
      assert.ok(list.sessions.some((s) => s.sessionId === session.sessionId));
      const messages = await within(tether.allMessages(session.sessionId), "session/messages");
      assert.deepEqual(
        messages.map((m) => m.role),
        ["user", "assistant", "tool", "assistant"],
      );
    } finally {
      await within(tether.shutdown(), "shutdown", 15_000);
    }
  });

  test("kernel/cancel stops a run with stopReason cancelled", { timeout: 60_000 }, async () => {
    const tether = await start(ws, [{ text: "too late", delay: 30 }]);
    try {
      const session = await within(tether.createSession(), "session/create");
      const started = nextEvent(tether, "run_started");
      const run = tether.run({ sessionId: session.sessionId, prompt: "wait" });
      await started;
      assert.equal(await within(run.cancel(), "kernel/cancel"), true);
      const result = await within(run.result, "the cancelled kernel/run");
      assert.equal(result.stopReason, "cancelled");
      assert.equal(await within(tether.cancel(session.sessionId), "second kernel/cancel"), false);
    } finally {
      await within(tether.shutdown(), "shutdown", 15_000);
    }
  });

  test("errors reject with their code", { timeout: 60_000 }, async () => {
    const tether = await start(ws, []);
    try {
      const error = await within(
        tether.getSession("no-such-session").then(
          () => assert.fail("session/get of an unknown id succeeded"),
          (e: unknown) => e,
        ),
        "session/get",
      );
      assert.ok(error instanceof ResponseError);
      assert.equal(errorCode(error), ErrorCodes.SessionNotFound);
      assert.equal(errorCode(error), -32010);

      const session = await within(tether.createSession(), "session/create");
      const fork = await within(
        tether.fork({ sessionId: session.sessionId }).then(
          (forked) => forked,
          (e: unknown) => e,
        ),
        "session/fork",
      );
      if (fork instanceof ResponseError) assert.equal(fork.code, ErrorCodes.MethodNotFound);
      else assert.equal((fork as { parentSessionId?: string }).parentSessionId, session.sessionId);
    } finally {
      await within(tether.shutdown(), "shutdown", 15_000);
    }
  });

  test("an invalid initializationOptions rejects start with ConfigError", { timeout: 60_000 }, async () => {
    const error = await within(
      TetherConnection.start({
        command: SERVER_COMMAND,
        workspaceFolders: [ws.uri],
        initializationOptions: { kernel: { max_iterations: "many" } },
      }).then(
        (tether) => {
          tether.dispose();
          assert.fail("initialize succeeded");
        },
        (e: unknown) => e,
      ),
      "initialize",
    );
    assert.equal(errorCode(error), ErrorCodes.ConfigError);
  });

  test("a server command that fails at once rejects start with its exit status and stderr", { timeout: 60_000 }, async () => {
    const failing = [process.execPath, "-e", "process.stderr.write('No module named tether\\n'); process.exit(3)"];
    const error = await within(
      TetherConnection.start({ command: failing }).then(
        (tether) => {
          tether.dispose();
          assert.fail("initialize succeeded");
        },
        (e: unknown) => e,
      ),
      "initialize",
    );
    assert.ok(error instanceof Error);
    assert.match(error.message, /exited with code 3 before it answered initialize/);
    assert.match(error.message, /No module named tether/);
    assert.doesNotMatch(error.message, /-32097/);
  });

  test("a server command that does not exist rejects start with the spawn error", { timeout: 60_000 }, async () => {
    const error = await within(
      TetherConnection.start({ command: ["/nonexistent/tether-python", "-m", "tether"] }).then(
        () => assert.fail("initialize succeeded"),
        (e: unknown) => e,
      ),
      "initialize",
    );
    assert.ok(error instanceof Error);
    assert.match(error.message, /cannot start the server command .*ENOENT/);
  });

  test("a server that dies fires onExit as unexpected and fails pending requests", { timeout: 60_000 }, async () => {
    const tether = await start(ws, [{ text: "never", delay: 30 }]);
    const session = await within(tether.createSession(), "session/create");
    const started = nextEvent(tether, "run_started");
    const run = tether.run({ sessionId: session.sessionId, prompt: "wait" });
    const exited = within(new Promise((resolve) => tether.onExit(resolve)), "onExit");
    await started;
    tether.process.kill("SIGKILL");
    assert.deepEqual(await exited, { code: null, signal: "SIGKILL", expected: false });
    await assert.rejects(within(run.result, "the pending kernel/run"));
    assert.equal(tether.running, false);
  });
});

describe("edits and permission requests against the real server", { timeout: 300_000 }, () => {
  let ws: Workspace;
  before(() => {
    ws = workspace();
  });
  after(() => ws.remove());

  test("write_file under approval ask: allowed, written, with its kind and diff", { timeout: 60_000 }, async () => {
    const asked: PermissionParams[] = [];
    const tether = await start(
      ws,
      [
        { text: "Writing.", toolCalls: [call("w1", "write_file", { path: "notes/hello.txt", content: "hello\n" })] },
        { text: "Done." },
      ],
      {
        onPermission: (params) => {
          asked.push(params);
          return "allow";
        },
      },
    );
    const events: ProgressParams[] = [];
    tether.onProgress((params) => events.push(params));
    try {
      const session = await within(tether.createSession(), "session/create");
      const result = await within(tether.run({ sessionId: session.sessionId, prompt: "note" }).result, "kernel/run");
      assert.equal(result.stopReason, "end_turn");
      assert.equal(result.toolCalls[0]?.isError, false, result.toolCalls[0]?.result);
      assert.equal(readFileSync(join(ws.root, "notes", "hello.txt"), "utf8"), "hello\n");
      assert.deepEqual(
        asked.map((p) => [p.toolCall.id, p.toolCall.name, p.sessionId]),
        [["w1", "write_file", session.sessionId]],
      );
      const call_ = events.find((e) => e.event.kind === "tool_call")?.event;
      assert.equal(call_?.kind === "tool_call" ? call_.toolKind : undefined, "edit");
      const done = events.find((e) => e.event.kind === "tool_call_update" && e.event.status === "completed")?.event;
      const diff = done?.kind === "tool_call_update" ? done.diff : undefined;
      assert.match(diff ?? "", /^\+\+\+ b\/notes\/hello\.txt$/m);
      assert.match(diff ?? "", /^\+hello$/m);
    } finally {
      await within(tether.shutdown(), "shutdown", 15_000);
    }
  });

  test("a prompt withdrawn by a cancelled run: the handler sees the cancellation, nothing hangs", { timeout: 60_000 }, async () => {
    let asked: (() => void) | undefined;
    const prompted = new Promise<void>((resolve) => (asked = resolve));
    let sawCancellation: (() => void) | undefined;
    const withdrawn = new Promise<void>((resolve) => (sawCancellation = resolve));
    const tether = await start(
      ws,
      [{ toolCalls: [call("w2", "write_file", { path: "never.txt", content: "no\n" })] }],
      {
        // A user who never answers: the handler waits until the question is withdrawn.
        onPermission: (_params, token) =>
          new Promise<never>(() => {
            token.onCancellationRequested(() => sawCancellation?.());
            asked?.();
          }),
      },
    );
    const events: ProgressParams[] = [];
    tether.onProgress((params) => events.push(params));
    try {
      const session = await within(tether.createSession(), "session/create");
      const run = tether.run({ sessionId: session.sessionId, prompt: "write" });
      await within(prompted, "tool/requestPermission");
      assert.equal(await within(run.cancel(), "kernel/cancel"), true);
      await within(withdrawn, "the handler's cancellation token");
      const result = await within(run.result, "the cancelled kernel/run");
      assert.equal(result.stopReason, "cancelled");
      const statuses = events.flatMap((e) =>
        e.event.kind === "tool_call_update" && e.event.toolCallId === "w2" ? [e.event.status] : [],
      );
      assert.deepEqual(statuses, ["cancelled"]);
      assert.equal(existsSync(join(ws.root, "never.txt")), false);
      // The connection still works after the withdrawn request.
      assert.equal((await within(tether.getSession(session.sessionId), "session/get")).running, false);
    } finally {
      await within(tether.shutdown(), "shutdown", 15_000);
    }
  });
});

describe("the default command", () => {
  test("is tether serve when tether is on PATH, else the configured Python with -m tether", () => {
    const bin = mkdtempSync(join(tmpdir(), "tether-path-"));
    const python = "/opt/python/bin/python3";
    assert.deepEqual(defaultCommand(python, bin), [python, "-P", "-m", "tether", "serve"]);
    writeFileSync(join(bin, "tether"), "#!/bin/sh\n", { mode: 0o644 });
    assert.deepEqual(defaultCommand(python, bin), [python, "-P", "-m", "tether", "serve"]);
    chmodSync(join(bin, "tether"), 0o755);
    assert.deepEqual(defaultCommand(python, bin), ["tether", "serve"]);
  });
});
