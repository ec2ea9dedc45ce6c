import { build } from "esbuild";

// The extension host side: Node, CommonJS, `vscode` provided by the editor.
await build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "dist/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node18",
  sourcemap: true,
  logLevel: "warning",
});

// The chat view's webview: a browser script and its stylesheet (codicons font included), all
// bundled so the view loads nothing from the network.
await build({
  entryPoints: { webview: "src/webview/main.ts", "webview-style": "src/webview/index.css" },
  bundle: true,
  outdir: "dist",
  format: "iife",
  platform: "browser",
  target: "chrome114",
  minify: true,
  loader: { ".ttf": "file" },
  assetNames: "[name]",
  logLevel: "warning",
});
