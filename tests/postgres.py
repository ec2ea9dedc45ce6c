"""A real PostgreSQL for the suite: ``TETHER_TEST_POSTGRES_URL``, or one started from ``pgserver``.

``pgserver`` (a dev dependency) ships PostgreSQL's binaries in its wheel, so a fresh machine runs
a real server without root or a system service. It starts once per test session, on first use,
in a temporary directory, listening on a Unix socket only, and stops when the session ends.
Each test that wants one gets a database of its own (:func:`new_database`), so tests, and the
several tether processes of one test, never see each other's rows.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

_counter = itertools.count()


def start_server() -> Iterator[str]:
    """Yield the URL of a server (external or started here); stop it after the yield.

    Its data lives outside pytest's temporary directories: as root, pgserver runs PostgreSQL as
    a user of its own, which needs to reach the data directory, and every pytest session makes
    ``/tmp/pytest-of-USER`` private to its user again when it starts.
    """
    external = os.environ.get("TETHER_TEST_POSTGRES_URL")
    if external:
        yield external
        return
    import pgserver

    directory = Path(tempfile.mkdtemp(prefix="tether-postgres-"))
    server = _started(pgserver, directory / "data")
    try:
        _tune_for_tests(server.get_uri())
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def _started(pgserver: Any, directory: Path) -> Any:
    """The server, started; ``pg_ctl`` gives up after 10 s, which a loaded machine can exceed, so
    a start that timed out is tried again (it finds the server that went on starting)."""
    for attempt in range(3):
        try:
            return pgserver.get_server(directory, cleanup_mode="stop")
        except Exception:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _tune_for_tests(url: str) -> None:
    """No waiting for the disk: a test server's data need not survive a power cut."""
    admin = create_engine(sqlalchemy_url(url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                connection.execute(text(f"ALTER SYSTEM SET {setting} = off"))
            connection.execute(text("SELECT pg_reload_conf()"))
    finally:
        admin.dispose()


def sqlalchemy_url(url: str) -> str:
    """``url`` with psycopg 3 as its driver (what ``tether[postgres]`` installs)."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def new_database(server_url: str) -> str:
    """Create an empty database on the server and return its URL."""
    name = f"tether_test_{os.getpid()}_{next(_counter)}"
    admin = create_engine(sqlalchemy_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return (
        make_url(sqlalchemy_url(server_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )


class OwnServer:
    """A PostgreSQL server of one test's own (from ``pgserver``), which it may restart."""

    def __init__(self) -> None:
        import pgserver

        self._directory = Path(tempfile.mkdtemp(prefix="tether-postgres-"))
        self._server = _started(pgserver, self._directory / "data")
        self.url = sqlalchemy_url(self._server.get_uri())

    def restart(self) -> None:
        """Stop the server (closing every connection to it) and start it again."""
        from pgserver._commands import pg_ctl
        from pgserver.utils import PostmasterInfo

        server = self._server
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)
        # pgserver stops the process it started: tell it the new one
        server._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)

    def go_down(self) -> None:
        """Stop the server (its clients then cannot reach it) until :meth:`come_back`."""
        from pgserver._commands import pg_ctl

        server = self._server
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)

    def come_back(self) -> None:
        """Start the server stopped by :meth:`go_down` again, on the same socket."""
        self._server.ensure_postgres_running()

    def stop(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self._directory, ignore_errors=True)
