# Every target bootstraps what it needs on a fresh machine (python3 with venv is all it assumes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
ACP_TESTS := tests/acp
ACP_STAMP := $(ACP_TESTS)/node_modules/.installed

.PHONY: install compile test package-test lint typecheck unit acp-schema acp-node-test lsp-node-test pygls-matrix vscode-test vscode-package vscode-webview-test vscode-e2e screenshots run bench fuzz schema clean

install: $(STAMP)

# Byte-compile tether's own modules: the server starts faster, even where the environment sets
# PYTHONDONTWRITEBYTECODE (imports then never write .pyc files themselves).
compile: install
	$(BIN)/python -m compileall -q server/tether

# pip 25.1 or later installs dependency groups (--group); the upgrade brings it on any machine.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	$(BIN)/python -m pip install --quiet -e '.[postgres]' --group dev
	touch $(STAMP) $(RUN_STAMP)

# What running needs and nothing more (no dev group): `make run` on a fresh machine.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

lint: install
	$(BIN)/ruff check server tests bench
	$(BIN)/ruff format --check server tests bench
	$(BIN)/lint-imports  # the layering of docs/architecture.md

typecheck: install
	$(BIN)/mypy

unit: compile $(ACP_STAMP)
	$(BIN)/pytest -q

# The ACP v1 JSON Schema that tests/acp validates tether's messages against: the official npm SDK,
# pinned by tests/acp/package-lock.json.
$(ACP_STAMP): $(ACP_TESTS)/package.json $(ACP_TESTS)/package-lock.json
	cd $(ACP_TESTS) && npm ci --no-audit --no-fund
	touch $(ACP_STAMP)

acp-schema: $(ACP_STAMP)

# `tether acp` driven by the npm SDK's client app (node --test).
acp-node-test: compile $(ACP_STAMP)
	cd $(ACP_TESTS) && node --test node/

# `tether serve` as a language server, driven by vscode-languageserver-protocol (node --test),
# pinned by tests/lsp/node/package-lock.json.
LSP_NODE := tests/lsp/node
LSP_NODE_STAMP := $(LSP_NODE)/node_modules/.installed

$(LSP_NODE_STAMP): $(LSP_NODE)/package.json $(LSP_NODE)/package-lock.json
	cd $(LSP_NODE) && npm ci --no-audit --no-fund
	touch $(LSP_NODE_STAMP)

lsp-node-test: compile $(LSP_NODE_STAMP)
	cd $(LSP_NODE) && node --test lsp.test.mjs

# The adapter's contract test, tests/lsp and tests/lsp/node under every pygls release the pin in
# pyproject.toml allows, each in a throwaway venv (RELEASES="2.0.0 2.1.1" to pick some).
pygls-matrix: compile $(LSP_NODE_STAMP)
	$(BIN)/python tests/lsp/pygls_matrix.py $(RELEASES)

# The VS Code extension (editor-clients/vscode): Node packages from its package-lock.json, then its
# typecheck, build and `node --test` suite against the real server of this checkout.
VSCODE := editor-clients/vscode
NPM_STAMP := $(VSCODE)/node_modules/.installed

$(NPM_STAMP): $(VSCODE)/package.json $(VSCODE)/package-lock.json
	cd $(VSCODE) && npm ci --no-audit --no-fund
	touch $(NPM_STAMP)

vscode-test: compile $(NPM_STAMP)
	cd $(VSCODE) && npm test

vscode-package: $(NPM_STAMP)
	cd $(VSCODE) && npm run package

# The chat view's webview script in headless Chromium (Debian's `chromium`; CHROMIUM=path to use
# another), replaying message streams recorded from the real server.
vscode-webview-test: $(NPM_STAMP)
	cd $(VSCODE) && npm run build && npm run build:test && node --test out/test/webview/

# A real VS Code: code-server from npm (pinned by e2e/package-lock.json; needs libkrb5-dev,
# build-essential and Debian's ripgrep, which seeds @vscode/ripgrep's download cache), the packaged
# .vsix installed in it, the real `tether serve` behind it, driven by Chromium through playwright-core.
# Screenshots: $(VSCODE)/e2e/artifacts/.
E2E := $(VSCODE)/e2e
E2E_STAMP := $(E2E)/node_modules/.installed
# node-gyp builds against the headers of the installed Node (Debian's nodejs ships them) rather
# than downloading them.
NODE_HEADERS := $(if $(wildcard /usr/include/node/node.h),npm_config_nodedir=/usr)

$(E2E_STAMP): $(E2E)/package.json $(E2E)/package-lock.json
	sh $(E2E)/seed-ripgrep.sh
	cd $(E2E) && npm_config_unsafe_perm=true $(NODE_HEADERS) npm ci --unsafe-perm --yes --no-audit --no-fund
	touch $(E2E_STAMP)

vscode-e2e: compile vscode-package vscode-webview-test $(E2E_STAMP)
	cd $(E2E) && node --test --test-concurrency=1 chat.e2e.mjs

# Screenshots of the terminal front ends: `tether chat`, and Neovim 0.11 with the plugin (and 0.7
# where Debian's is `nvim` on PATH), each the real program on a pseudo-terminal against a loopback
# model endpoint, its screen (pyte) drawn to PNG by Pillow in a dark and a light palette
# (tests/screenshots/; the font is DejaVu Sans Mono, Debian's fonts-dejavu-core).
# SCREENSHOTS=dir writes them elsewhere.
SCREENSHOTS ?= docs/screenshots

screenshots: compile
	$(BIN)/python -m tests.screenshots.shoot $(SCREENSHOTS)

test: lint typecheck unit acp-node-test lsp-node-test vscode-test

# The sdist and wheel of a clean checkout (git archive: nothing untracked slips in), checked by
# twine and check-wheel-contents, the wheel installed in a fresh venv without the dev group.
package-test: install
	$(BIN)/pytest -q tests/package

run: $(RUN_STAMP)
	$(BIN)/python -m compileall -q server/tether
	$(BIN)/tether run "What is this project?" --workspace . --script examples/demo-script.json

bench: compile
	$(BIN)/python bench/rpc_bench.py
	$(BIN)/python bench/first_prompt.py
	$(BIN)/python bench/kernel_bench.py
	$(BIN)/python bench/session_bench.py
	$(BIN)/python bench/acp_bench.py

# 100,000 mutated frames at a real `tether serve`, over stdio then TCP (bench/README.md, "Fuzz").
# SEED=n replays a run.
fuzz: compile
	$(BIN)/python bench/fuzz_wire.py $(if $(SEED),--seed $(SEED))
	$(BIN)/python bench/fuzz_wire.py --tcp $(if $(SEED),--seed $(SEED))
	$(BIN)/python bench/fuzz_wire.py --acp $(if $(SEED),--seed $(SEED))

schema: install
	$(BIN)/python -m tether schema > docs/protocol.schema.json

clean:
	rm -rf $(VENV) dist .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
	rm -rf $(VSCODE)/node_modules $(VSCODE)/dist $(VSCODE)/out $(VSCODE)/tether.vsix
	rm -rf $(E2E)/node_modules $(E2E)/artifacts
	rm -rf $(ACP_TESTS)/node_modules $(LSP_NODE)/node_modules
