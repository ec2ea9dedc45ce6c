import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

/** The repository root (tests run from out/test/). */
export const REPO = resolve(__dirname, "..", "..", "..", "..");

/** The server's command line: the repository's virtualenv, or TETHER_SERVER (space-separated). */
export const SERVER_COMMAND: string[] = process.env.TETHER_SERVER
  ? process.env.TETHER_SERVER.split(" ")
  : [join(REPO, ".venv", "bin", "python"), "-m", "tether", "serve"];

/** Every wait of the tests is bounded by this. */
export const WAIT_MS = 20_000;

export interface Turn {
  text?: string;
  /** Reasoning streamed before the text (`thought_delta`), kept in `metadata.reasoning`. */
  thinking?: string;
  toolCalls?: { id: string; name: string; arguments: string }[];
  delay?: number;
  usage?: { inputTokens: number; outputTokens: number };
  /** The provider's finish reason: `length` (cut at the token limit), `content_filter` (refused). */
  finishReason?: string;
  /** Fail this request with this message, as an endpoint that answers `status`. */
  error?: string;
  status?: number;
}

export interface Workspace {
  root: string;
  uri: string;
  provider(turns: Turn[]): Record<string, unknown>;
  remove(): void;
}

/**
 * A temporary project (README.md, src/app.py) and scripts for the scripted provider. The servers
 * started from then on keep their data (the SQLite session store the extension asks for by
 * default, checkpoints) beside it, never in the user's data directory.
 */
export function workspace(): Workspace {
  const base = mkdtempSync(join(tmpdir(), "tether-vscode-"));
  process.env.XDG_DATA_HOME = join(base, "data");
  const root = join(base, "project");
  mkdirSync(join(root, "src"), { recursive: true });
  writeFileSync(join(root, "README.md"), "# Demo\nA small project.\n");
  writeFileSync(join(root, "src", "app.py"), "def main():\n    return 42\n");
  let scripts = 0;
  return {
    root,
    uri: pathToFileURL(root).href,
    provider(turns) {
      const script = join(base, `script-${++scripts}.json`);
      writeFileSync(script, JSON.stringify(turns));
      return { type: "scripted", script };
    },
    remove: () => rmSync(base, { recursive: true, force: true }),
  };
}

export function call(id: string, name: string, args: Record<string, unknown> = {}) {
  return { id, name, arguments: JSON.stringify(args) };
}

/** `promise`, or a rejection naming `what` after `ms`. */
export function within<T>(promise: Promise<T>, what: string, ms = WAIT_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
