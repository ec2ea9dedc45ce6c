/** A stand-in for the chat view's webview: it records what the extension posts and speaks for the user. */
import { join } from "node:path";
import type { FromWebview, ToWebview } from "../src/messages";
import { within } from "./helpers";
import * as stub from "./vscode-stub";

/** A webview that records what it is posted and lets the test speak for the user. */
export class FakeWebview {
  readonly received: ToWebview[] = [];
  private readonly fromUser = new stub.EventEmitter<FromWebview>();
  private readonly posted = new stub.EventEmitter<void>();
  html = "";

  view() {
    const recorder = this;
    return {
      webview: {
        options: {},
        cspSource: "vscode-webview:",
        asWebviewUri: (uri: unknown) => uri,
        postMessage: async (message: ToWebview) => {
          recorder.received.push(JSON.parse(JSON.stringify(message)) as ToWebview);
          recorder.posted.fire();
          return true;
        },
        onDidReceiveMessage: recorder.fromUser.event,
        set html(value: string) {
          recorder.html = value;
        },
        get html() {
          return recorder.html;
        },
      },
      visible: true,
      show: () => undefined,
      onDidDispose: () => ({ dispose: () => undefined }),
    };
  }

  send(message: FromWebview): void {
    this.fromUser.fire(message);
  }

  /** Resolves with the first message from index `from` on that satisfies `predicate`. */
  next<T extends ToWebview["type"]>(
    type: T,
    from = 0,
    predicate: (message: Extract<ToWebview, { type: T }>) => boolean = () => true,
  ): Promise<Extract<ToWebview, { type: T }>> {
    const find = () =>
      this.received
        .slice(from)
        .find((m): m is Extract<ToWebview, { type: T }> => m.type === type && predicate(m as Extract<ToWebview, { type: T }>));
    return within(
      new Promise((resolve) => {
        const found = find();
        if (found) return resolve(found);
        const listener = this.posted.event(() => {
          const hit = find();
          if (hit) {
            listener.dispose();
            resolve(hit);
          }
        });
      }),
      `a ${type} message`,
    );
  }
}


/** What the tests use of the built extension. */
export interface Extension {
  activate(context: { subscriptions: { dispose(): unknown }[]; extensionUri: unknown }): void;
  deactivate(): Promise<void>;
}

interface Provider {
  resolveWebviewView(view: unknown): void;
}

/**
 * The built extension activated with `context`, its chat view resolved into a new FakeWebview
 * (`tether.chat.focus` answered as VS Code does once the view is shown).
 */
export function openChat(context: { subscriptions: { dispose(): unknown }[]; extensionUri: unknown }): {
  extension: Extension;
  webview: FakeWebview;
} {
  stub.commands.set("tether.chat.focus", () => undefined);
  const extension = require(join(__dirname, "..", "..", "dist", "extension.js")) as Extension;
  extension.activate(context);
  const webview = new FakeWebview();
  (stub.webviewProviders.get("tether.chat") as Provider).resolveWebviewView(webview.view());
  return { extension, webview };
}

/** Deactivate what {@link openChat} activated and dispose what it registered. */
export async function closeChat(extension: Extension, context: { subscriptions: { dispose(): unknown }[] }): Promise<void> {
  await within(extension.deactivate(), "deactivate", 15_000);
  for (const item of context.subscriptions) item.dispose();
}
