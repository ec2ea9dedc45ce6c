"""The sandbox policy of a run: tether's own directories, read-only to commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.config import CheckpointsConfig, TetherConfig
from tether.kernel.kernel import sandbox_policy


def test_the_policy_names_the_directories_of_the_environment_in_effect_at_each_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = TetherConfig()
    for name in ("first", "second", "first"):
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / name / "config"))
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / name / "data"))
        assert sandbox_policy(config).state == (
            str(tmp_path / name / "config" / "tether"),
            str(tmp_path / name / "data" / "tether"),
            str(tmp_path / name / "data" / "tether" / "checkpoints"),
        )


def test_the_policy_names_a_checkpoint_store_configured_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = TetherConfig(checkpoints=CheckpointsConfig(path="~/elsewhere"))
    assert sandbox_policy(config).state == (
        str(tmp_path / "home" / ".config" / "tether"),
        str(tmp_path / "home" / ".local" / "share" / "tether"),
        str(tmp_path / "home" / "elsewhere"),
    )
