"""The eglot section of docs/lsp.md, run as written there (the elisp block is read from the
file, evaluated before eglot is loaded, as a user's init file does) in Emacs in batch mode with
eglot 1.9 (Debian's emacs-nox and elpa-eglot): ``M-x eglot`` in a Python buffer starts the real
``tether serve`` found as ``tether`` on PATH, and ``tether.ask`` runs a turn whose answer comes
from the provider of the user's config.toml."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "lsp.md"
ANSWER = "Answered through eglot."

DRIVE = r"""
(require 'eglot)
(setq eglot-sync-connect 30)
(find-file {app})
(python-mode)
(call-interactively #'eglot)
(let ((server (eglot-current-server))
      (data (expand-file-name "tether/sessions" (getenv "XDG_DATA_HOME")))
      (found nil))
  (unless server (error "no server"))
  (princ (format "server: %s\n" (plist-get (eglot--server-info server) :name)))
  (eglot-execute-command server "tether.ask" ["Hello?"])
  (with-timeout (30 (error "no transcript with the answer"))
    (while (not found)
      (accept-process-output nil 0.1)
      (dolist (file (and (file-directory-p data)
                         (directory-files-recursively data "transcript\\.md\\'")))
        (with-temp-buffer
          (insert-file-contents file)
          (when (search-forward {answer} nil t) (setq found file))))))
  (princ (format "answered: %s\n" found))
  (eglot-shutdown server))
"""


def eglot_block() -> str:
    text = DOC.read_text()
    section = text[text.index("\n## Emacs eglot") :]
    match = re.search(r"```elisp\n(.*?)```", section, re.S)
    assert match
    return match.group(1)


def elisp_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is an elisp string for these characters


@pytest.mark.skipif(
    shutil.which("emacs") is None and not os.environ.get("TETHER_REQUIRE_EMACS"),
    reason="no emacs (apt-get install emacs-nox elpa-eglot)",
)
def test_the_eglot_section(tmp_path: Path) -> None:
    env = dict(os.environ)
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        env[name] = str(tmp_path / name.lower())
    env["HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.pop("TETHER_LOG_LEVEL", None)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": ANSWER}]))
    config = tmp_path / "xdg_config_home" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[provider]\ntype = "scripted"\nscript = {json.dumps(str(script))}\n')
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "app.py").write_text("x = 1\n")
    init = tmp_path / "init.el"
    init.write_text(
        eglot_block()
        + DRIVE.format(app=elisp_string(str(project / "app.py")), answer=elisp_string(ANSWER))
    )
    done = subprocess.run(
        ["emacs", "--batch", "-l", str(init)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "server: tether" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "answered: " in done.stdout
