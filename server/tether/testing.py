"""A pytest plugin for harnesses that drive tether: the real server, a scripted model, a client.

Installed with tether (the ``pytest11`` entry point ``tether``), it gives these fixtures:

``tether_client``
    A :class:`~tether.client.TetherClient` of a fresh ``tether serve`` (one per test), initialized
    with ``tether_workspace`` as its workspace and ``tether_options`` as its configuration, and
    shut down after the test. Needs pytest-asyncio; it runs on the loop of the test.
``tether_script``
    The turns the scripted model plays, in the format of ``docs/testing.md`` (default ``[]``).
    Override the fixture, or parametrize it::

        @pytest.mark.parametrize("tether_script", [[{"text": "Hello."}]])
        async def test_hello(tether_client):
            session = await tether_client.create_session()
            assert (await tether_client.run(session.session_id, "hi")).response == "Hello."
``tether_function``
    A function that decides each turn instead of a script (``None`` by default): it gets the
    :class:`~tether.providers.ModelRequest` (``messages``, ``tools``, ``system``) and returns the
    turn (a mapping in the script's format, a ``ScriptTurn``, or the text alone). The server
    runs in its own process and imports the function by name, so it must be defined at the top
    level of a module the tests can import (a test module is fine: the server gets the tests'
    ``sys.path``); a ``"package.module:name"`` string works too.
``tether_workspace``
    The workspace folder: an empty directory under ``tmp_path`` by default.
``tether_options``
    The ``initializationOptions``: the scripted provider playing ``tether_script`` (written to a
    file under ``tmp_path``) or asking ``tether_function``, and a checkpoint store under
    ``tmp_path``. Override it to add
    configuration or to use another provider.
``tether_on_permission``
    The client's ``tool/requestPermission`` handler: ``None`` by default (the server's policy
    decides).

:func:`tool_call` writes a tool call of a script turn. :func:`rewind` puts the workspace back as
it was before a session's turns changed it (``session/rewind``), so that cases sharing a workspace
start from the same files.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

if TYPE_CHECKING:  # tether itself is imported when a test needs it, not when pytest starts
    from tether.client import PermissionHandler, TetherClient
    from tether.protocol.checkpoints import RewindResult
    from tether.providers import TurnFunction

__all__ = [
    "function_options",
    "function_spec",
    "rewind",
    "scripted_options",
    "server_env",
    "tool_call",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def tool_call(name: str, call_id: str | None = None, /, **arguments: Any) -> dict[str, Any]:
    """A tool call for a script turn's ``toolCalls``: ``tool_call("read_file", path="a.py")``."""
    call: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id is not None:
        call["id"] = call_id
    return call


def scripted_options(script: Path | str) -> dict[str, Any]:
    """``initializationOptions`` that make the server play the script file ``script``."""
    return {"provider": {"type": "scripted", "script": str(Path(script).resolve())}}


def function_options(function: TurnFunction | str) -> dict[str, Any]:
    """``initializationOptions`` that make the server ask ``function`` for each turn (see
    :func:`function_spec`). The server must be able to import it: :func:`server_env`."""
    return {"provider": {"type": "scripted", "function": function_spec(function)}}


def function_spec(function: TurnFunction | str) -> str:
    """``"module:name"`` of a function the server can import; a string is taken as it is.

    The server is another process: a lambda, a nested function or a bound method cannot be
    found there by name, so they raise ``TypeError`` saying so."""
    if isinstance(function, str):
        return function
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None)
    found: Any = None
    if module and name and "<" not in name:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part, None)
    if found is not function:
        raise TypeError(
            f"tether_function: {function!r} cannot be imported by name: the server runs in its "
            "own process, so define the function at the top level of a module (not a lambda, "
            "a nested function or a bound method), or give its 'package.module:name'"
        )
    return f"{module}:{name}"


def server_env(options: Mapping[str, Any]) -> dict[str, str]:
    """Environment for a server playing ``options``: with a turn function, this process's
    ``sys.path`` (so the server imports the function as the tests did, test modules included)."""
    provider = options.get("provider")
    if not isinstance(provider, Mapping) or not provider.get("function"):
        return {}
    return {"PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}


async def rewind(
    client: TetherClient,
    session_id: str,
    *,
    message_id: str | None = None,
    history: bool = False,
    force: bool = False,
) -> RewindResult | None:
    """Put back the files the session's turns changed, as they were before the first of them
    (``message_id``: before the turn whose prompt it is, and the turns after it); ``None`` when no
    turn changed any file. ``history`` also removes those turns from the session; ``force``
    overwrites files changed outside tether since it recorded them (else the server refuses with
    ``InvalidParamsError`` naming them in ``data.paths``, and nothing is changed).

    The workspace is reset through the server, as any client would do it (``session/checkpoints``,
    then ``session/rewind``): files the ``.gitignore`` files exclude are not tracked, so not reset.
    """
    if message_id is None:
        checkpoints = await client.checkpoints(session_id)
        if not checkpoints:
            return None
        message_id = checkpoints[0].message_id
    return await client.rewind(session_id, message_id, files=True, history=history, force=force)


@pytest.fixture
def tether_script() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def tether_function() -> TurnFunction | str | None:
    return None


@pytest.fixture
def tether_workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return workspace


@pytest.fixture
def tether_options(
    tmp_path: Path,
    tether_script: list[dict[str, Any]],
    tether_function: TurnFunction | str | None,
) -> dict[str, Any]:
    if tether_function is not None:
        options = function_options(tether_function)
    else:
        script = tmp_path / "tether-script.json"
        script.write_text(json.dumps(tether_script))
        options = scripted_options(script)
    options["checkpoints"] = {"path": str(tmp_path / "tether-checkpoints")}  # not the user's
    return options


@pytest.fixture
def tether_on_permission() -> PermissionHandler | None:
    return None


def _async_fixture(function: _F) -> _F:
    """Declared with pytest-asyncio, so the fixture works in its strict mode too; without
    pytest-asyncio, with pytest's own decorator (pytest then says the fixture needs a plugin)."""
    try:
        import pytest_asyncio
    except ImportError:
        return cast(_F, pytest.fixture(function))
    return cast(_F, pytest_asyncio.fixture(function))


@_async_fixture
async def tether_client(
    tether_workspace: Path,
    tether_options: dict[str, Any],
    tether_on_permission: PermissionHandler | None,
) -> AsyncIterator[TetherClient]:
    from tether.client import TetherClient

    async with TetherClient.spawn(
        workspace=tether_workspace,
        options=tether_options,
        env=server_env(tether_options),
        on_permission=tether_on_permission,
        client_name="tether-pytest",
    ) as client:
        yield client
