// `tether acp` driven by the official npm SDK's client app (`@agentclientprotocol/sdk`), with
// node --test: a turn with a tool call and a permission question, then the session listed and
// loaded again. Run by `make acp-node-test` (and `make test`).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { Readable, Writable } from "node:stream";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import * as acp from "@agentclientprotocol/sdk";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const PYTHON = process.env.TETHER_PYTHON ?? join(REPO, ".venv", "bin", "python");
const WAIT_MS = 20_000;

/** A project, a home with a user config playing `turns`, and a running `tether acp`. */
function start(turns) {
  const base = mkdtempSync(join(tmpdir(), "tether-acp-node-"));
  const project = join(base, "project");
  mkdirSync(join(project, "src"), { recursive: true });
  writeFileSync(join(project, "src", "app.py"), "def main():\n    return 42\n");
  const script = join(base, "script.json");
  writeFileSync(script, JSON.stringify(turns));
  const config = join(base, "config", "tether");
  mkdirSync(config, { recursive: true });
  writeFileSync(
    join(config, "config.toml"),
    `[provider]\ntype = "scripted"\nscript = ${JSON.stringify(script)}\n`,
  );
  const child = spawn(PYTHON, ["-m", "tether", "acp"], {
    cwd: project,
    env: { ...process.env, HOME: base, XDG_CONFIG_HOME: join(base, "config") },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const exited = new Promise((done) => child.once("exit", done));
  // The agent's end of stdin closed, it is waited for before its home goes: it may still be
  // writing there (a checkpoint store prepared in the background) as it exits.
  const stop = async () => {
    child.stdin.end();
    await within(exited, "tether acp exits");
    rmSync(base, { recursive: true, force: true });
  };
  return { project, stream, stop };
}

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

test("a turn reads a file, asks before writing, and the session can be listed and loaded", async () => {
  const { project, stream, stop } = start([
    { toolCalls: [{ id: "r1", name: "read_file", arguments: { path: "src/app.py" } }] },
    { toolCalls: [{ id: "w1", name: "write_file", arguments: { path: "out.txt", content: "hi\n" } }] },
    { text: "Done." },
  ]);
  const updates = [];
  const questions = [];
  const app = acp
    .client({ name: "tether-node-test" })
    .onNotification(acp.methods.client.session.update, async ({ params }) => {
      updates.push(params.update);
    })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
      questions.push(params);
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    });
  try {
    await within(
      app.connectWith(stream, async (agent) => {
        const init = await agent.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: {},
        });
        assert.equal(init.protocolVersion, 1);
        assert.equal(init.agentCapabilities.loadSession, true);

        const { sessionId } = await agent.request(acp.methods.agent.session.new, {
          cwd: project,
          mcpServers: [],
        });
        const answer = await agent.request(acp.methods.agent.session.prompt, {
          sessionId,
          prompt: [{ type: "text", text: "Write out.txt" }],
        });
        assert.equal(answer.stopReason, "end_turn");
        assert.ok(existsSync(join(project, "out.txt")));
        assert.equal(questions.length, 1);
        assert.equal(questions[0].toolCall.title, "Write out.txt");
        const proposed = { type: "diff", path: join(project, "out.txt"), newText: "hi\n" };
        assert.deepEqual(questions[0].toolCall.content, [proposed]); // asked with the change


        const starts = updates.filter((u) => u.sessionUpdate === "tool_call");
        assert.deepEqual(
          starts.map((u) => [u.title, u.kind]),
          [
            ["Read src/app.py", "read"],
            ["Write out.txt", "edit"],
          ],
        );
        const diffs = updates
          .filter((u) => u.sessionUpdate === "tool_call_update" && u.content)
          .flatMap((u) => u.content.filter((c) => c.type === "diff"));
        assert.deepEqual(diffs, [proposed]); // one diff per update
        assert.deepEqual(starts[1].content, [proposed]); // the pending tool_call shows it too

        const listed = await agent.request(acp.methods.agent.session.list, { cwd: project });
        assert.deepEqual(
          listed.sessions.map((s) => s.sessionId),
          [sessionId],
        );
        updates.length = 0;
        await agent.request(acp.methods.agent.session.load, {
          sessionId,
          cwd: project,
          mcpServers: [],
        });
        assert.equal(updates[0].sessionUpdate, "user_message_chunk");
        assert.equal(updates.filter((u) => u.sessionUpdate === "tool_call").length, 2);
      }),
      "the turn",
    );
  } finally {
    await stop();
  }
});

test("an unknown session is an error response, never silence", async () => {
  const { stream, stop } = start([]);
  const app = acp.client({ name: "tether-node-test" });
  try {
    await within(
      app.connectWith(stream, async (agent) => {
        await agent.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: {},
        });
        await assert.rejects(
          agent.request(acp.methods.agent.session.prompt, {
            sessionId: "no-such-session",
            prompt: [{ type: "text", text: "hi" }],
          }),
          (error) => error.code === -32002,
        );
      }),
      "the error",
    );
  } finally {
    await stop();
  }
});

test("modes are offered as the config option of category mode, kept in sync with set_mode", async () => {
  const { project, stream, stop } = start([]);
  const updates = [];
  const app = acp
    .client({ name: "tether-node-test" })
    .onNotification(acp.methods.client.session.update, async ({ params }) => {
      updates.push(params.update);
    });
  try {
    await within(
      app.connectWith(stream, async (agent) => {
        await agent.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: {},
        });
        const created = await agent.request(acp.methods.agent.session.new, {
          cwd: project,
          mcpServers: [],
        });
        const mode = created.configOptions.find((option) => option.category === "mode");
        assert.equal(mode.id, "mode");
        assert.equal(mode.currentValue, created.modes.currentModeId);
        assert.deepEqual(
          mode.options.map((option) => option.value),
          created.modes.availableModes.map((m) => m.id),
        );
        const set = await agent.request(acp.methods.agent.session.setConfigOption, {
          sessionId: created.sessionId,
          configId: "mode",
          value: "read_only",
        });
        assert.equal(set.configOptions.find((o) => o.id === "mode").currentValue, "read_only");
        assert.deepEqual(
          updates.filter((u) => u.sessionUpdate === "current_mode_update"),
          [{ sessionUpdate: "current_mode_update", currentModeId: "read_only" }],
        );
      }),
      "the modes",
    );
  } finally {
    await stop();
  }
});
