"""What tether takes from an MCP server's stdout, so that a hostile server cannot stall tether or
grow its memory without bound.

The server's messages are newline-delimited JSON. :func:`read_lines` splits them in linear time and
holds at most ``limit`` bytes of one line: a longer one is skipped, keeping only its first and last
bytes (an answer's ``id`` is at one end or the other). :class:`Guard` then decides, message by
message, what reaches the SDK's session:

- an answer (a response or an error) passes when it is valid JSON-RPC; one that is not, or that
  was over the limit, becomes an error answer for its ``id`` when its ``id`` can be read, so the
  call that waits for it fails at once (code :data:`INVALID_ANSWER`) instead of waiting out its
  timeout;
- of the notifications, only progress, cancellation and ``notifications/tools/list_changed``
  pass, progress and list changes at a bounded rate (per call, and for list changes per server,
  a burst of :data:`PROGRESS_BURST`, then :data:`PROGRESS_RATE` a second); tether has no use
  for the others (log messages, other list changes), so a flood of them costs a JSON parse each
  and nothing more;
- requests from the server (``ping``, ``roots/list``…) pass while fewer than
  ``max_server_requests`` of them await tether's answer; the others are dropped, so a server
  that sends requests without reading the answers cannot pile up tasks in tether;
- anything else (not JSON, not JSON-RPC) is dropped, counted, and logged a few times.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from anyio.abc import ByteReceiveStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from tether.tools.sandbox import format_size

logger = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_SERVER_REQUESTS = 16
_TOOLS_CHANGED = "tools/list_changed"  # its bucket among the progress tokens' (those are keyed
# by the JSON of the token, so never this bare text)
PROGRESS_BURST = 32  # progress notifications of one call passed at once…
PROGRESS_RATE = 10.0  # …and then per second
INVALID_ANSWER = -32099  # made here, for an answer that could not be used; never on the wire
KEPT_ENDS = 4096  # bytes kept of each end of a line over the limit
LOGGED_INVALID = 5  # invalid messages logged one by one, per connection
_MAX_PROGRESS_TOKENS = 256

_ID = r'(-?\d+|"(?:[^"\\]|\\.){0,200}")'
_HEAD_ID = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID.encode())
_TAIL_ID = re.compile(rb',\s*"id"\s*:\s*' + _ID.encode() + rb"\s*\}\s*$")


@dataclass(frozen=True, slots=True)
class Oversize:
    """A line over the limit: its size and the bytes kept of its two ends."""

    size: int
    head: bytes
    tail: bytes


async def read_lines(stream: ByteReceiveStream, limit: int) -> AsyncIterator[bytes | Oversize]:
    """The lines of ``stream`` (without their newline); a line over ``limit`` bytes as an
    :class:`Oversize`. A last line without a newline is dropped (the server ended mid-message)."""
    buffer = bytearray()
    skipping: Oversize | None = None  # the line being skipped
    async for chunk in stream:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if skipping is not None:
                skipping = _skip(skipping, piece)
            elif len(buffer) + len(piece) > limit:
                skipping = _skip(_skip(Oversize(0, b"", b""), bytes(buffer)), piece)
                buffer.clear()
            else:
                buffer += piece
            if end < 0:
                break
            if skipping is not None:
                yield skipping
                skipping = None
            else:
                yield bytes(buffer)
                buffer.clear()
            start = end + 1


def _skip(line: Oversize, piece: bytes) -> Oversize:
    head = line.head if len(line.head) >= KEPT_ENDS else (line.head + piece)[:KEPT_ENDS]
    return Oversize(line.size + len(piece), head, (line.tail + piece)[-KEPT_ENDS:])


class Guard:
    """The policy for one connection's incoming messages (see the module's docstring)."""

    def __init__(
        self,
        server: str,
        *,
        max_server_requests: int = MAX_SERVER_REQUESTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.max_server_requests = max_server_requests
        self.clock = clock
        self.invalid = 0  # messages dropped as invalid
        self.last_invalid: str | None = None  # what the last of them was
        self.dropped_requests = 0
        self._server_requests: set[str] = set()
        self._progress: dict[str, tuple[float, float]] = {}  # token: (allowance, when)
        self.dropped_progress = 0

    def inbound(self, line: bytes | Oversize) -> SessionMessage | None:
        """The message to hand to the session for ``line``; ``None`` to drop it."""
        if isinstance(line, Oversize):
            return self._oversize(line)
        if not line.strip():
            return None
        try:
            data = orjson.loads(line)  # refuses nesting deeper than 1024 levels
        except orjson.JSONDecodeError:
            self._reject(f"a line that is not JSON ({_clip(line)})")
            return None
        if not isinstance(data, dict):
            self._reject(f"JSON that is not an object ({_clip(line)})")
            return None
        try:
            if "method" not in data:
                return self._answer(data, line)
            if not self._admit(data):
                return None
            return self._validated(data, line)
        except RecursionError:  # pydantic on deeply nested content
            self._reject(f"a message nested too deeply ({_clip(line)})")
            return None

    def outbound(self, message: SessionMessage) -> None:
        """Note an answer tether sends to one of the server's requests."""
        root = message.message
        if isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
            self._server_requests.discard(_key(root.id))

    def _admit(self, data: dict[str, Any]) -> bool:
        method = data["method"]
        if "id" in data:  # a request
            if len(self._server_requests) >= self.max_server_requests:
                self.dropped_requests += 1
                if self.dropped_requests == 1:
                    logger.warning(
                        "MCP server %s sends requests faster than they are answered: "
                        "requests beyond %d waiting ones are dropped",
                        self.server,
                        self.max_server_requests,
                    )
                return False
            self._server_requests.add(_key(data["id"]))
            return True
        params = data.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/cancelled":
            self._server_requests.discard(_key(params.get("requestId")))
            return True
        if method == "notifications/progress":
            return self._progress_due(_key(params.get("progressToken")))
        if method == "notifications/tools/list_changed":
            return self._progress_due(_TOOLS_CHANGED)
        return False

    def _progress_due(self, token: str) -> bool:
        """A token bucket per progress token (that is, per call)."""
        now = self.clock()
        allowance, then = self._progress.get(token, (float(PROGRESS_BURST), now))
        allowance = min(float(PROGRESS_BURST), allowance + (now - then) * PROGRESS_RATE)
        if len(self._progress) >= _MAX_PROGRESS_TOKENS and token not in self._progress:
            self._progress.clear()
        if allowance < 1:
            self._progress[token] = (allowance, now)
            self.dropped_progress += 1
            return False
        self._progress[token] = (allowance - 1, now)
        return True

    def _answer(self, data: dict[str, Any], line: bytes) -> SessionMessage | None:
        request_id = data.get("id")
        if not _is_id(request_id):
            self._reject(f"an answer without a usable id ({_clip(line)})")
            return None
        model = types.JSONRPCError if "error" in data else types.JSONRPCResponse
        try:
            return SessionMessage(model.model_validate(data, by_name=False))
        except ValidationError as exc:
            self._reject(f"an invalid answer to request {request_id!r} ({_first_error(exc)})")
            return _error(request_id, f"its answer is not valid JSON-RPC ({_first_error(exc)})")

    def _validated(self, data: dict[str, Any], line: bytes) -> SessionMessage | None:
        try:
            message = types.jsonrpc_message_adapter.validate_python(data, by_name=False)
            return SessionMessage(message)
        except ValidationError as exc:
            if "id" in data:
                self._server_requests.discard(_key(data["id"]))
            self._reject(f"an invalid message ({_first_error(exc)}: {_clip(line)})")
            return None

    def _oversize(self, line: Oversize) -> SessionMessage | None:
        what = (
            f"a message of {format_size(line.size)}, over the limit of "
            f"{format_size(MAX_MESSAGE_BYTES)}"
        )
        match = _HEAD_ID.match(line.head) or _TAIL_ID.search(line.tail)
        self._reject(what)
        if match is None:
            return None
        request_id = json.loads(match.group(1))
        return _error(request_id, f"its answer was {what}")

    def _reject(self, what: str) -> None:
        self.invalid += 1
        self.last_invalid = what
        if self.invalid <= LOGGED_INVALID:
            logger.warning("MCP server %s sent %s; dropped", self.server, what)
        if self.invalid == LOGGED_INVALID:
            logger.warning("MCP server %s: further invalid messages are not logged", self.server)


def _error(request_id: Any, message: str) -> SessionMessage:
    error = types.ErrorData(code=INVALID_ANSWER, message=message)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _key(value: object) -> str:
    """A request id or progress token as one hashable, bounded key (``7`` and ``"7"`` alike)."""
    return str(value)[:256]


def _clip(line: bytes, size: int = 100) -> str:
    text = line[:size].decode("utf-8", errors="replace")
    return repr(text + "…" if len(line) > size else text)


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
