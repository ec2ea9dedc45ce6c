"""tether's log, told to the client: warnings and errors as ``window/logMessage`` (what every LSP
client keeps in its log), and, once the client asked with ``$/setTrace``, the info lines as
``$/logTrace`` (``verbose`` adds the logger's name).

One handler on the ``tether`` logger sends to the connection registered last; a record logged
while one is being sent is not sent again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

Send = Callable[[str, Any], None]
Trace = Callable[[], str]

_TYPES = {logging.ERROR: 1, logging.WARNING: 2, logging.INFO: 3}


class ClientLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self._send: Send | None = None
        self._trace: Trace = lambda: "off"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sending = threading.local()

    def connect(self, send: Send, trace: Trace, loop: asyncio.AbstractEventLoop) -> None:
        self._send, self._trace, self._loop = send, trace, loop

    def emit(self, record: logging.LogRecord) -> None:
        send, loop = self._send, self._loop
        if send is None or loop is None or getattr(self._sending, "on", False):
            return
        trace = self._trace()
        if record.levelno < logging.WARNING and trace == "off":
            return
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the stderr handler reports it
            return
        if record.levelno >= logging.WARNING:
            kind = _TYPES[logging.ERROR if record.levelno >= logging.ERROR else logging.WARNING]
            notification: tuple[str, Any] = (
                "window/logMessage",
                {"type": kind, "message": f"tether: {message}"},
            )
        else:
            params = {"message": message}
            if trace == "verbose":
                params["verbose"] = record.name
            notification = ("$/logTrace", params)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._deliver(send, notification)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self._deliver, send, notification)

    def _deliver(self, send: Send, notification: tuple[str, Any]) -> None:
        self._sending.on = True
        try:
            send(*notification)
        except Exception:
            pass  # the connection is gone: nothing to tell
        finally:
            self._sending.on = False


HANDLER = ClientLog()


def attach(send: Send, trace: Trace, loop: asyncio.AbstractEventLoop) -> None:
    """Send tether's log to this connection from now on."""
    logger = logging.getLogger("tether")
    if HANDLER not in logger.handlers:
        logger.addHandler(HANDLER)
    HANDLER.connect(send, trace, loop)


def detach() -> None:
    """Keep tether's log off the wire (a client that did not ask for it)."""
    HANDLER._send = None


def trace_set(value: str) -> None:
    """``$/setTrace``: tether's info lines are made while the client traces; the handlers that
    were there before (stderr) keep the level they had."""
    root, logger = logging.getLogger(), logging.getLogger("tether")
    if value == "off":
        logger.setLevel(logging.NOTSET)
        return
    for handler in root.handlers:
        if handler.level == logging.NOTSET:
            handler.setLevel(root.level)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
