"""The client's layer as ``workspace/didChangeConfiguration`` changes it: what its ``settings``
hold, what a running server keeps until it restarts, and the same validation and workspace rules
as ``initializationOptions`` (in the App, over real files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.config import (
    RESTART_SECTIONS,
    SETTINGS_SOURCE,
    TetherConfig,
    held_for_restart,
    keep_restart_sections,
    settings_layer,
)
from tether.protocol import ConfigError, ErrorCode, InitializeParams
from tether.rpc.app import App


def test_settings_are_the_layer_itself_or_the_table_under_tether() -> None:
    layer = {"provider": {"model": "m"}}
    assert settings_layer(layer) == layer
    assert settings_layer({"tether": layer}) == layer
    both = {"tether": layer, "other": {}}
    assert settings_layer(both) == both  # not grouped: "tether" is then an (unknown) key


@pytest.mark.parametrize("settings", [None, {}, {"tether": {}}])
def test_no_settings_or_empty_ones_carry_no_layer(settings: Any) -> None:
    assert settings_layer(settings) is None


@pytest.mark.parametrize("settings", [[], "provider.model=m", 3])
def test_settings_that_are_not_a_table_are_a_config_error(settings: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_layer(settings)
    assert caught.value.code == ErrorCode.CONFIG_ERROR
    assert caught.value.data == {"key": None, "source": SETTINGS_SOURCE}


def test_the_keys_held_for_a_restart_are_those_of_the_sections_a_server_keeps() -> None:
    before = TetherConfig()
    after = before.overlay(
        {
            "provider": {"model": "other"},
            "tools": {"approval": "auto"},
            "sessions": {"store": "sqlite"},
            "limits": {"maxFrameBytes": 1 << 20},
        }
    )
    assert held_for_restart(before, after) == ["sessions.store", "limits.max_frame_bytes"]
    assert held_for_restart(before, before.overlay({"provider": {"model": "x"}})) == []


def test_keeping_the_restart_sections_takes_them_from_the_layer_the_server_started_with() -> None:
    started = {"sessions": {"store": "memory"}, "provider": {"model": "a"}}
    new = {"sessions": {"store": "sqlite"}, "log": {"level": "debug"}, "provider": {"model": "b"}}
    assert keep_restart_sections(new, started) == {
        "provider": {"model": "b"},
        "sessions": {"store": "memory"},
    }
    assert keep_restart_sections(new, None) == {"provider": {"model": "b"}}
    assert set(RESTART_SECTIONS) <= set(TetherConfig.model_fields)


def initialized(tmp_path: Path, workspace: Path, options: dict[str, Any]) -> App:
    app = App(environ={"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)})
    app.initialize(
        InitializeParams.model_validate(
            {"workspaceFolders": [{"uri": workspace.as_uri()}], "initializationOptions": options}
        )
    )
    return app


async def test_new_settings_apply_over_the_same_files_and_a_repository_still_cannot_widen_them(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    (repo / ".tether").mkdir(parents=True)
    (repo / ".tether" / "config.toml").write_text("[kernel]\nmax_iterations = 3\n")
    app = initialized(tmp_path, repo, {"tools": {"approval": "deny"}})
    try:
        assert app.reconfigure({"tools": {"approval": "ask"}, "provider": {"model": "m2"}}) == []
        config = app.config()
        assert (config.tools.approval, config.provider.model) == ("ask", "m2")
        assert config.kernel.max_iterations == 3  # the workspace file is still read

        (repo / ".tether" / "config.toml").write_text('[provider]\nbase_url = "http://evil"\n')
        app.reconfigure({"provider": {"model": "m3"}})
        config = app.config()
        assert config.provider.model == "m3" and config.provider.base_url is None
        assert app.workspace_error is not None
        assert app.workspace_error.data["key"] == "provider.base_url"
    finally:
        await app.aclose()


async def test_invalid_settings_raise_naming_the_key_and_change_nothing(tmp_path: Path) -> None:
    app = initialized(tmp_path, tmp_path, {"provider": {"model": "m1"}})
    try:
        with pytest.raises(ConfigError) as caught:
            app.reconfigure({"provider": {"model": "m2"}, "kernel": {"maxIterations": 0}})
        assert caught.value.data == {"key": "kernel.max_iterations", "source": SETTINGS_SOURCE}
        assert app.config().provider.model == "m1"
    finally:
        await app.aclose()
