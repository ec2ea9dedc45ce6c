"""The LSP face's tests under every pygls release tether allows (``make pygls-matrix``).

CI installs one pygls release; ``tether.lsp.pygls_adapter`` relies on pygls internals that a
release may change. For each release this makes a throwaway venv holding only that pygls, sees
the project's own venv through a ``.pth`` file (so the rest of the environment is the one the
project tests with), and runs the adapter's contract test and ``tests/lsp`` with it, then
``tests/lsp/node`` when its packages are installed (``make lsp-node-test`` installs them).

    .venv/bin/python tests/lsp/pygls_matrix.py            # every release the pin allows
    .venv/bin/python tests/lsp/pygls_matrix.py 2.0.0 2.1.1

The releases come from the package index (``pip index versions pygls``), filtered by the pygls
requirement in pyproject.toml; pre-releases are left out. Exits non-zero if any release fails.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
NODE_TESTS = ROOT / "tests" / "lsp" / "node"
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"]
CONTRACT = "tests/lsp/test_pygls_adapter.py"


def pinned_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if requirement.name == "pygls":
            return requirement
    raise SystemExit("pyproject.toml has no pygls requirement")


def allowed_releases(requirement: Requirement) -> list[str]:
    """The final releases on the index that the requirement allows, oldest first."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "pygls"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"Available versions: (.+)", listing)
    if found is None:
        raise SystemExit(f"no pygls versions in pip's answer:\n{listing}")
    versions = [Version(v.strip()) for v in found.group(1).split(",")]
    return [
        str(v)
        for v in sorted(versions)
        if not v.is_prerelease and requirement.specifier.contains(v)
    ]


def make_venv(release: str, where: Path) -> Path:
    """A venv with pygls ``release`` alone, then the project's venv behind it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True)
    python = where / "bin" / "python"
    # Installed before the .pth exists: pip then sees an empty venv and leaves the project's alone.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--no-deps",
            f"pygls=={release}",
        ],
        check=True,
    )
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    project_site = sysconfig.get_paths()["purelib"]
    (Path(site) / "zz_project_venv.pth").write_text(
        f"import site; site.addsitedir({project_site!r})\n"
    )
    return python


def run(release: str, python: Path) -> list[tuple[str, bool]]:
    results: list[tuple[str, bool]] = []
    shown = subprocess.run(
        [
            python,
            "-c",
            "import importlib.metadata as m, pygls; print(m.version('pygls'), pygls.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"== pygls {release}: {shown}", flush=True)
    if not shown.startswith(f"{release} "):
        return [("venv holds the release", False)]
    for name, command in (
        ("contract", [python, *PYTEST, CONTRACT]),
        ("tests/lsp", [python, *PYTEST, "tests/lsp"]),
    ):
        results.append((name, subprocess.run(command, cwd=ROOT).returncode == 0))
    if (NODE_TESTS / "node_modules").is_dir():
        node = subprocess.run(
            ["node", "--test", "lsp.test.mjs"],
            cwd=NODE_TESTS,
            env={**os.environ, "TETHER_PYTHON": str(python)},
        )
        results.append(("tests/lsp/node", node.returncode == 0))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="*", help="pygls releases (default: all the pin allows)")
    args = parser.parse_args()
    requirement = pinned_requirement()
    releases = args.releases or allowed_releases(requirement)
    print(f"pyproject: {requirement}; releases: {', '.join(releases)}", flush=True)
    table: dict[str, list[tuple[str, bool]]] = {}
    for release in releases:
        with tempfile.TemporaryDirectory(prefix=f"pygls-{release}-") as tmp:
            table[release] = run(release, make_venv(release, Path(tmp) / "venv"))
    print("\npygls  " + "  ".join(name for name, _ in next(iter(table.values()), [])))
    for release, results in table.items():
        print(f"{release:6} " + "  ".join("pass" if ok else "FAIL" for _, ok in results))
    return 0 if all(ok for results in table.values() for _, ok in results) else 1


if __name__ == "__main__":
    sys.exit(main())
