"""How the command line sets up its log: the level's sources, ``log.file`` rotated by size, a
file that cannot be opened, and the user file read only when it may set ``[log]``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.cli import setup_logging


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


def file_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]


@pytest.mark.usefixtures("restored_logging")
def test_the_log_file_is_rotated_by_size_and_keeps_its_backups(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "logs" / "tether.log"
    environ = {
        "HOME": str(home),
        "TETHER_LOG_FILE": str(path),
        "TETHER_LOG_MAX_BYTES": "4096",
        "TETHER_LOG_BACKUPS": "2",
        "TETHER_LOG_LEVEL": "info",
    }
    setup_logging(None, environ)
    logger = logging.getLogger("tether.test")
    for number in range(200):
        logger.info("line %03d %s", number, "x" * 60)
    logger.debug("not at this level")
    for handler in file_handlers():
        handler.flush()
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["tether.log", "tether.log.1", "tether.log.2"]
    assert all(p.stat().st_size <= 4096 for p in path.parent.iterdir())
    assert "line 199" in path.read_text()
    assert "not at this level" not in path.read_text()


@pytest.mark.usefixtures("restored_logging")
def test_the_flag_wins_over_the_configured_level(home: Path) -> None:
    setup_logging("error", {"HOME": str(home), "TETHER_LOG_LEVEL": "debug"})
    assert logging.getLogger().level == logging.ERROR
    setup_logging(None, {"HOME": str(home), "TETHER_LOG_LEVEL": "debug"})
    assert logging.getLogger().level == logging.DEBUG
    setup_logging(None, {"HOME": str(home)})
    assert logging.getLogger().level == logging.WARNING


@pytest.mark.usefixtures("restored_logging")
def test_the_user_file_sets_the_log(tmp_path: Path, home: Path) -> None:
    config = home / ".config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[log]\nlevel = "info"\nfile = "{tmp_path / "user.log"}"\n')
    setup_logging(None, {"HOME": str(home)})
    assert logging.getLogger().level == logging.INFO
    assert [Path(h.baseFilename) for h in file_handlers()] == [tmp_path / "user.log"]  # type: ignore[attr-defined]


def run_tether(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_log_file_that_cannot_be_opened_is_said_and_the_command_goes_on(
    tmp_path: Path, home: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    shown = run_tether(home, "config", "show", TETHER_LOG_FILE=str(blocker / "tether.log"))
    assert shown.returncode == 0
    assert "log.file" in shown.stderr and "cannot be opened" in shown.stderr
    assert "logging to stderr only" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_a_bad_log_setting_is_one_line_and_the_command_still_reports_it(home: Path) -> None:
    shown = run_tether(home, "config", "show", TETHER_LOG_MAX_BYTES="small")
    assert shown.returncode == 1
    assert "Traceback" not in shown.stderr
    assert "environment TETHER_LOG_MAX_BYTES: log.max_bytes" in shown.stderr
