"""The app's session store and sweep: chosen by the configuration, run after the handshake."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tether.protocol import ConfigError, InitializeParams, SessionNotFound
from tether.protocol.sessions import CreateSessionParams, GetSessionParams
from tether.rpc.app import App
from tether.sessions.ids import utcnow
from tether.sessions.opening import OpeningStore


def init(tmp_path: Path) -> InitializeParams:
    return InitializeParams.model_validate({"workspaceFolders": [{"uri": tmp_path.as_uri()}]})


async def test_the_app_sweeps_sessions_idle_longer_than_the_ttl(tmp_path: Path) -> None:
    now = [utcnow()]
    app = App(environ={"TETHER_SESSIONS_TTL": "1h", "HOME": str(tmp_path)}, clock=lambda: now[0])
    app.initialize(init(tmp_path))
    await asyncio.sleep(0)  # the sweep starts after the handshake
    try:
        session = await app.sessions.create(CreateSessionParams())
        now[0] += timedelta(minutes=59)
        assert await app.sweep() == []
        now[0] += timedelta(minutes=2)
        assert await app.sweep() == [session.session_id]
        with pytest.raises(SessionNotFound):
            await app.sessions.get(GetSessionParams(session_id=session.session_id))
    finally:
        await app.aclose()


async def test_without_a_ttl_nothing_is_swept(tmp_path: Path) -> None:
    app = App(environ={"HOME": str(tmp_path)}, clock=lambda: utcnow() + timedelta(days=9999))
    app.initialize(init(tmp_path))
    try:
        await app.sessions.create(CreateSessionParams())
        assert await app.sweep() == []
    finally:
        await app.aclose()


async def test_a_sqlite_store_is_opened_after_the_handshake_and_closed_with_the_app(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data" / "sessions.db"
    app = App(environ={"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(path)})
    result = app.initialize(init(tmp_path))
    assert result.capabilities.sessions.store == "sqlite"
    assert result.capabilities.sessions.durable
    assert isinstance(app.sessions.store, OpeningStore)
    session = await app.sessions.create(CreateSessionParams(title="kept"))
    await app.aclose()
    assert path.exists()

    again = App(environ={"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(path)})
    again.initialize(init(tmp_path))
    try:
        got = await again.sessions.get(GetSessionParams(session_id=session.session_id))
        assert got.title == "kept"
    finally:
        await again.aclose()


async def test_a_store_that_cannot_be_opened_is_a_config_error_on_every_call(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("")
    app = App(
        environ={
            "TETHER_SESSIONS_STORE": "sqlite",
            "TETHER_SESSIONS_PATH": str(tmp_path / "file" / "sessions.db"),
        }
    )
    app.initialize(init(tmp_path))
    try:
        for _ in range(2):
            with pytest.raises(ConfigError) as failed:
                await app.sessions.create(CreateSessionParams())
            assert failed.value.data["key"] == "sessions.store"
    finally:
        await app.aclose()


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
async def test_a_postgres_or_postgresql_url_opens_the_store_with_psycopg(
    tmp_path: Path, postgres_url: str, scheme: str
) -> None:
    url = f"{scheme}://{postgres_url.split('://', 1)[1]}"  # as a user writes it: no driver
    app = App(environ={"TETHER_SESSIONS_STORE": url, "HOME": str(tmp_path)})
    result = app.initialize(init(tmp_path))
    try:
        assert result.capabilities.sessions.store == "postgresql"
        session = await app.sessions.create(CreateSessionParams(title="shared"))
        got = await app.sessions.get(GetSessionParams(session_id=session.session_id))
        assert got.title == "shared"
    finally:
        await app.aclose()


async def test_a_postgresql_store_without_its_driver_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # not installed
    store = "postgresql://tether@db.example/sessions"
    app = App(environ={"TETHER_SESSIONS_STORE": store, "HOME": str(tmp_path)})
    app.initialize(init(tmp_path))
    try:
        for _ in range(2):
            with pytest.raises(ConfigError) as failed:
                await app.sessions.create(CreateSessionParams())
            assert failed.value.data == {"key": "sessions.store", "source": "sessions"}
            assert "pip install 'tether[postgres]'" in str(failed.value)
    finally:
        await app.aclose()


async def test_a_store_that_could_not_be_opened_is_opened_by_a_later_call(tmp_path: Path) -> None:
    blocker = tmp_path / "data"
    blocker.write_text("")  # a file where the store's directory should be: opening fails
    environ = {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(blocker / "s.db")}
    app = App(environ=environ)
    app.initialize(init(tmp_path))
    try:
        with pytest.raises(ConfigError):
            await app.sessions.create(CreateSessionParams())
        blocker.unlink()  # the cause is gone (as a database that was down comes back)
        session = await app.sessions.create(CreateSessionParams(title="now"))
        assert session.title == "now"
    finally:
        await app.aclose()


async def test_initialize_names_the_store_the_session_service_will_serve_from(
    tmp_path: Path,
) -> None:
    """The handshake says the store's kind without making the session service (its models
    load after it); what it says is what the service, once made, serves from."""
    app = App(environ={"HOME": str(tmp_path)})
    result = app.initialize(init(tmp_path))
    try:
        said = result.capabilities.sessions
        assert app._sessions is None  # not made by the handshake
        store = app.sessions.store
        assert (said.store, said.durable) == (store.kind, store.durable) == ("memory", False)
    finally:
        await app.aclose()


async def test_the_session_methods_are_served_once_their_table_is_made(tmp_path: Path) -> None:
    """Every session method ``initialize`` lists is in the table made on the first of them,
    and a method put there before (a test's own) stays."""
    app = App(environ={"HOME": str(tmp_path)})
    listed = set(app.initialize(init(tmp_path)).capabilities.methods)

    async def own(params: object) -> None:
        return None

    app.methods["session/get"] = own
    try:
        app.load_session_methods()
        assert {m for m in listed if m.startswith("session/")} - {
            "session/commands",
            "session/compact",
        } == {m for m in app.methods if m.startswith("session/")}
        assert app.methods["session/get"] is own
    finally:
        await app.aclose()
