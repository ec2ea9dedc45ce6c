"""What honouring ignore files costs a walk (``list_files``, ``search_text``): a tree walked with
and without its ``.gitignore``/``.ignore`` rules, and ripgrep's ``--files`` beside it when it is
installed. A report: nothing in it asserts a timing.

    .venv/bin/python bench/walk_bench.py [--dirs 400] [--files 50] [--rounds 5]
    .venv/bin/python bench/walk_bench.py --tree /usr/lib --rules realistic,names,globs --rounds 1

Without ``--tree``, a synthetic tree (``--dirs`` x ``--files``, a root ``.gitignore`` of 10
lines, a nested one in every tenth directory). With ``--tree``, a copy of that real tree (its
own ignore files kept, symlinks copied as links) with a root ``.gitignore`` of each rule set of
``--rules`` in turn:

- ``own``: the tree's ignore files alone;
- ``realistic``: about 150 lines of the kinds GitHub's Python and Node templates have;
- ``names``: ``--patterns`` plain names and extensions (``name123``, ``*.ext123``);
- ``globs``: ``--patterns`` globs filed under their literal start (``d123*x``);
- ``unfiled``: ``--patterns`` globs nothing can be filed under (``*d123*``).

``--budget`` is the walk's time budget (default: no bound, to time the whole walk); a walk cut
short says so. Run it with ``PYTHONPATH`` set to another checkout's ``server`` to time that one
(a walk without a budget parameter is called without it).
"""

from __future__ import annotations

import argparse
import inspect
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.tools.walk import walk_files

ROOT_RULES = "*.log\n!keep.log\nbuild/\n/top.txt\n*.tmp\ndist/\ncoverage/\n*.pyc\n.env\n*.bak\n"
NESTED_RULES = "generated/\n!important.tmp\n*.snap\n"

REALISTIC = """
__pycache__/
*.py[cod]
*$py.class
*.so
.Python
build/
develop-eggs/
dist/
downloads/
eggs/
.eggs/
lib64/
parts/
sdist/
var/
wheels/
share/python-wheels/
*.egg-info/
.installed.cfg
*.egg
MANIFEST
*.manifest
*.spec
pip-log.txt
pip-delete-this-directory.txt
htmlcov/
.tox/
.nox/
.coverage
.coverage.*
.cache
nosetests.xml
coverage.xml
*.cover
*.py,cover
.hypothesis/
.pytest_cache/
cover/
*.mo
*.pot
local_settings.py
db.sqlite3
db.sqlite3-journal
instance/
.webassets-cache
.scrapy
docs/_build/
.pybuilder/
target/
.ipynb_checkpoints
profile_default/
ipython_config.py
.pdm.toml
__pypackages__/
celerybeat-schedule
celerybeat.pid
*.sage.py
.env
.venv
env/
venv/
ENV/
env.bak/
venv.bak/
.spyderproject
.spyproject
.ropeproject
/site
.mypy_cache/
.dmypy.json
dmypy.json
.pyre/
.pytype/
cython_debug/
logs
*.log
npm-debug.log*
yarn-debug.log*
yarn-error.log*
lerna-debug.log*
.pnpm-debug.log*
report.[0-9]*.[0-9]*.[0-9]*.[0-9]*.json
pids
*.pid
*.seed
*.pid.lock
lib-cov
coverage
*.lcov
.nyc_output
.grunt
bower_components
.lock-wscript
build/Release
node_modules/
jspm_packages/
web_modules/
*.tsbuildinfo
.npm
.eslintcache
.stylelintcache
.rpt2_cache/
.rts2_cache_cjs/
.rts2_cache_es/
.rts2_cache_umd/
.node_repl_history
*.tgz
.yarn-integrity
.env.development.local
.env.test.local
.env.production.local
.env.local
.parcel-cache
.next
out
.nuxt
.vuepress/dist
.temp
.docusaurus
.serverless/
.fusebox/
.dynamodb/
.tern-port
.vscode-test
.yarn/cache
.yarn/unplugged
.yarn/build-state.yml
.yarn/install-state.gz
.pnp.*
*.swp
*~
.DS_Store
Thumbs.db
!keep.log
"""


def rule_sets(patterns: int) -> dict[str, str]:
    return {
        "own": "",
        "realistic": REALISTIC.lstrip(),
        "names": "".join(f"name{n}\n*.ext{n}\n" for n in range(patterns // 2)),
        "globs": "".join(f"d{n}*x\n" for n in range(patterns)),
        "unfiled": "".join(f"*d{n}*\n" for n in range(patterns)),
    }


def make_tree(root: Path, dirs: int, files: int) -> None:
    """``dirs`` directories of ``files`` files each; every tenth holds a nested .gitignore, and
    a tenth of the files match some rule."""
    (root / ".gitignore").write_text(ROOT_RULES)
    for d in range(dirs):
        directory = root / f"pkg{d % 20}" / f"mod{d}"
        directory.mkdir(parents=True)
        if d % 10 == 0:
            (directory / ".gitignore").write_text(NESTED_RULES)
        for f in range(files):
            suffix = ".log" if f % 10 == 0 else ".py"
            (directory / f"file{f}{suffix}").write_text("x\n")


def timed(work: Callable[[], str], rounds: int) -> tuple[float, str]:
    work()  # warm the page cache
    times, found = [], ""
    for _ in range(rounds):
        start = time.perf_counter()
        found = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), found


def walker(root: Path, include_ignored: bool, budget: float | None) -> Callable[[], str]:
    extra: dict[str, Any] = {}
    if "budget" in inspect.signature(walk_files).parameters:
        extra["budget"] = budget if budget is not None else 1e9

    def run() -> str:
        walk = walk_files(
            root,
            root,
            glob=None,
            max_entries=10_000_000,
            stop=threading.Event(),
            include_ignored=include_ignored,
            **extra,
        )
        cut = f", cut short ({walk.stopped})" if getattr(walk, "stopped", None) else ""
        return f"{len(walk.files):7d} files of {walk.scanned} entries{cut}"

    return run


def ripgrep(root: Path) -> Callable[[], str] | None:
    rg = shutil.which("rg")
    if rg is None:
        return None
    command = [rg, "--files", "--no-require-git", str(root)]
    return lambda: (
        f"{len(subprocess.run(command, capture_output=True).stdout.splitlines()):7d} files"
    )


def report(label: str, work: Callable[[], str], rounds: int) -> None:
    seconds, found = timed(work, rounds)
    print(f"{label:52} {seconds * 1000:10.1f} ms  {found}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dirs", type=int, default=400)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", type=Path, help="a real tree to copy and walk")
    parser.add_argument("--rules", default="own,realistic,names,globs")
    parser.add_argument("--patterns", type=int, default=10_000)
    parser.add_argument("--budget", type=float, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp).resolve() / "tree"
        if args.tree is None:
            root.mkdir()
            make_tree(root, args.dirs, args.files)
            print(f"tree: {args.dirs} directories x {args.files} files; median of {args.rounds}")
            report("tether walk, includeIgnored", walker(root, True, args.budget), args.rounds)
            report(
                "tether walk, ignore files honoured", walker(root, False, args.budget), args.rounds
            )
            rg = ripgrep(root)
            if rg is not None:
                report("ripgrep --files (a process)", rg, args.rounds)
            return
        shutil.copytree(args.tree, root, symlinks=True, ignore_dangling_symlinks=True)
        print(f"tree: a copy of {args.tree}; median of {args.rounds}")
        report("tether walk, includeIgnored", walker(root, True, args.budget), args.rounds)
        sets = rule_sets(args.patterns)
        for name in args.rules.split(","):
            text = sets[name]
            if text:
                (root / ".gitignore").write_text(text)
            label = f"ignore files honoured, {name} ({text.count(chr(10))} root lines)"
            report(label, walker(root, False, args.budget), args.rounds)


if __name__ == "__main__":
    main()
