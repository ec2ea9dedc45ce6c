"""Fuzzing the wire of a real ``tether serve`` or ``tether acp``: mutated input, and a driver that
checks the answers.

:class:`FrameFuzzer` makes byte chunks of every kind of fault a client or a broken pipe can send
(bit flips, truncated bodies, wrong, huge, negative or missing ``Content-Length``, lower-case
headers, garbage between frames, invalid JSON, valid JSON of the wrong shape, requests nested
deeper than the decoder takes) and valid *sentinel* requests, whose ids start with ``sentinel-``
and which must each be answered exactly once whatever came before them. The requests nested too
deep (ids ``deep-``) must each be answered exactly once too, with InvalidRequest. Nothing it
makes stores anything or ends the server: no ``session/create``, ``append`` that could succeed,
``delete``, ``shutdown`` or ``exit``. :class:`LineFuzzer` makes the same faults as NDJSON lines
for ``tether acp``; :class:`Face` tells the driver how each face makes sessions and runs turns.

:func:`fuzz` drives a server with them while runs of the scripted model are in flight, and
reports what a client would care about: sentinels unanswered or answered twice, anything on the
output that is not a well-formed frame, whether the process is still alive, and its memory.

Used by ``tests/e2e/test_fuzz.py`` (a bounded run in ``make test``) and ``bench/fuzz_wire.py``
(``make fuzz``, 100,000 frames).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tether.protocol import ErrorCode
from tether.protocol.framing import Frame, FrameDecoder, encode_frame
from tether.protocol.limits import MAX_REQUEST_DEPTH
from tether.testing import scripted_options

SENTINEL = "sentinel-"
DEEP = "deep-"

# Declared lengths far over any frame limit: the server must answer -32700 and resync.
HUGE_LENGTHS = [
    b"268435457",
    b"2147483648",
    b"1099511627776",
    b"99999999999999999999999999",
    b"9" * 5000,
]


class FrameFuzzer:
    """Mutated frames aimed at ``session_id`` (an existing session) and sentinels for it."""

    def __init__(self, seed: int, session_id: str) -> None:
        self.random = random.Random(seed)
        self.session_id = session_id
        self.sent: Counter[str] = Counter()  # chunks sent, by mutation
        self.deep_ids: list[str] = []  # of the requests nested too deep
        self._next_id = 0
        self._mutations: list[Callable[[], bytes]] = [
            self.bit_flips,
            self.truncated_body,
            self.wrong_length,
            self.huge_length,
            self.negative_length,
            self.missing_length,
            self.lower_case_header,
            self.garbage,
            self.invalid_json,
            self.wrong_shape,
            self.too_deep,
            self.valid,
        ]

    # -- what a run sends --------------------------------------------------------------------

    def mutated(self) -> bytes:
        """One chunk of faulty (or, now and then, valid) input: every kind in turn at first,
        then drawn at random."""
        total = sum(self.sent.values())
        if total < len(self._mutations):
            mutation = self._mutations[total]
        else:
            mutation = self.random.choice(self._mutations)
        self.sent[mutation.__name__] += 1
        return mutation()

    sentinel_method = "session/get"
    deep_spaces = (b"", b" ", b"\n")  # white space in the requests nested too deep

    def sentinel(self) -> tuple[str, bytes]:
        """A valid request that succeeds (``session/get`` of the session): its id and frame."""
        self._next_id += 1
        msg_id = f"{SENTINEL}{self._next_id}"
        body = self.sentinel_params()
        return msg_id, self._frame(
            {"jsonrpc": "2.0", "id": msg_id, "method": self.sentinel_method, "params": body}
        )

    def sentinel_params(self) -> dict[str, Any]:
        return {"sessionId": self.session_id}

    # -- the mutations -----------------------------------------------------------------------

    def bit_flips(self) -> bytes:
        data = bytearray(self._frame(self._message()))
        for _ in range(self.random.randint(1, 4)):
            data[self.random.randrange(len(data))] ^= 1 << self.random.randrange(8)
        return bytes(data)

    def truncated_body(self) -> bytes:
        frame = self._frame(self._message())
        return frame[: self.random.randrange(1, len(frame))]

    def wrong_length(self) -> bytes:
        body = orjson.dumps(self._message())
        length = max(0, len(body) + self.random.choice([-20, -3, -1, 1, 2, 50, 4000]))
        return b"Content-Length: %d\r\n\r\n%s" % (length, body)

    def huge_length(self) -> bytes:
        """Each of :data:`HUGE_LENGTHS` in turn."""
        body = orjson.dumps(self._message())
        length = HUGE_LENGTHS[self.sent["huge_length"] % len(HUGE_LENGTHS)]
        return b"Content-Length: " + length + b"\r\n\r\n" + body

    def negative_length(self) -> bytes:
        body = orjson.dumps(self._message())
        return b"Content-Length: -%d\r\n\r\n%s" % (len(body), body)

    def missing_length(self) -> bytes:
        body = orjson.dumps(self._message())
        header = self.random.choice([b"Content-Type: application/json\r\n", b"", b"X: 1\r\n"])
        return header + b"\r\n" + body

    def lower_case_header(self) -> bytes:
        body = orjson.dumps(self._message())
        name = self.random.choice([b"content-length", b"CONTENT-LENGTH", b"content-Length"])
        return name + b": %d\r\n\r\n%s" % (len(body), body)

    def garbage(self) -> bytes:
        pieces = [
            self.random.randbytes(self.random.randint(1, 64)),
            b"\r\n",
            b"\r\n\r\n",
            b"Content-Length:",
            b"Content-Length: 12",
            b"{",
            b"\x00\xff",
        ]
        return b"".join(self.random.choices(pieces, k=self.random.randint(1, 6)))

    def invalid_json(self) -> bytes:
        body = self.random.choice(
            [
                b"{",
                b'{"jsonrpc":"2.0","id":1,',
                b"\xff\xfe\xfd",
                b"nul",
                b'{"a":NaN}',
                b"[" * 2000,
                b'{"jsonrpc":"2.0","method":"session/get","params":{"sessionId":"\x01"}}',
                orjson.dumps(self._message())[:-1],
            ]
        )
        return self.wrap(body)

    def wrong_shape(self) -> bytes:
        return self._frame(self.random.choice(self._wrong_shapes()))

    def too_deep(self) -> bytes:
        """A request nested deeper than the decoder takes (arrays, objects, both, with white
        space or not, a string of brackets inside), its id before or after the deep member."""
        self._next_id += 1
        msg_id = f"{DEEP}{self._next_id}"
        self.deep_ids.append(msg_id)
        levels = self.random.choice([MAX_REQUEST_DEPTH, 2000, 100_000])
        space = self.random.choice(self.deep_spaces)
        opening, closing = self.random.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'{"[{":[', b"]}")])
        inner = (opening + space) * levels + b'"]}\\\\"' + (space + closing) * levels
        members = [
            b'"jsonrpc":"2.0"',
            b'"id":' + orjson.dumps(msg_id),
            b'"method":' + orjson.dumps(self.sentinel_method),
            b'"params":{"sessionId":' + orjson.dumps(self.session_id) + b',"x":' + inner + b"}",
        ]
        self.random.shuffle(members)
        return self.wrap(b"{" + b",".join(members) + b"}")

    def valid(self) -> bytes:
        return self._frame(self._message())

    # -- the material ------------------------------------------------------------------------

    def _message(self) -> dict[str, Any]:
        """A valid request or notification that changes nothing that lasts."""
        self._next_id += 1
        msg_id: Any = self.random.choice([self._next_id, f"m-{self._next_id}"])
        sid = self.session_id
        method, params = self.random.choice(
            [
                ("session/get", {"sessionId": sid}),
                ("session/list", {"limit": 5}),
                ("session/messages", {"sessionId": sid, "limit": 3, "order": "desc"}),
                ("session/get", {"sessionId": "no-such-session"}),
                ("kernel/cancel", {"sessionId": "no-such-session"}),
                ("no/such/method", {"x": [1, 2, 3]}),
                ("session/append", {"sessionId": sid, "messages": [{"role": "nobody"}]}),
            ]
        )
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if self.random.random() < 0.9:
            message["id"] = msg_id
        return message

    def _wrong_shapes(self) -> list[Any]:
        sid = self.session_id
        return [
            [],
            [{"jsonrpc": "2.0", "id": 1, "method": "session/get"}],
            None,
            "a string",
            12,
            {},
            {"jsonrpc": "1.0", "id": 1, "method": "session/get"},
            {"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/get"},
            {"jsonrpc": "2.0", "id": [1], "method": "session/get"},
            {"jsonrpc": "2.0", "id": True, "method": "session/get"},
            {"jsonrpc": "2.0", "id": 1.5, "method": "session/get"},
            {"jsonrpc": "2.0", "id": None, "method": "session/get"},
            {"jsonrpc": "2.0", "id": 3, "method": 42},
            {"jsonrpc": "2.0", "id": 4, "method": "session/get", "params": [sid]},
            {"jsonrpc": "2.0", "id": 5, "method": "session/get", "params": "x"},
            {"jsonrpc": "2.0", "id": 6, "method": "session/get", "params": {"sessionId": 7}},
            {"jsonrpc": "2.0", "id": 7, "method": "session/messages", "params": {"limit": -1}},
            {"jsonrpc": "2.0", "id": 8, "method": "session/append", "params": {"messages": 1}},
            {"jsonrpc": "2.0", "id": 9, "method": "kernel/run", "params": {"prompt": 5}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": [1]}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": {"a": 1}}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": None}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": [1]},
            {"jsonrpc": "2.0", "method": "$/cancelRequest"},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 123456789}},
            {"jsonrpc": "2.0", "id": "tether-999", "result": {"outcome": "allow"}},
            {"jsonrpc": "2.0", "id": 77, "error": {"code": "x"}},
            {"jsonrpc": "2.0", "id": 78},
            {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"x": 1}},
            {"jsonrpc": "2.0", "id": 10, "method": "textDocument/hover", "params": {}},
            {"jsonrpc": "2.0", "id": 11, "method": "workspace/executeCommand", "params": {}},
            {"deep": self._deep(200)},
        ]

    def _deep(self, depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value] if self.random.random() < 0.5 else {"a": value}
        return value

    def _frame(self, message: Any) -> bytes:
        return self.wrap(orjson.dumps(message))

    def wrap(self, body: bytes) -> bytes:
        """``body`` framed as this wire frames a message."""
        return encode_frame(body)


class LineFuzzer(FrameFuzzer):
    """The same faults for ``tether acp``'s NDJSON, one message per line: bit flips (which may
    make a newline, cutting a line in two), truncated lines, CRLF and blank lines, garbage,
    two messages on one line, invalid JSON, valid JSON of the wrong shape, requests nested too
    deep. Every chunk ends its line, so what follows it starts a line of its own. Sentinels are
    ``session/list`` requests."""

    sentinel_method = "session/list"
    deep_spaces = (b"", b" ", b"\t")  # a newline would end the line

    def __init__(self, seed: int, session_id: str) -> None:
        super().__init__(seed, session_id)
        self._mutations = [
            self.bit_flips,
            self.truncated_body,
            self.crlf_and_blank_lines,
            self.garbage,
            self.two_on_a_line,
            self.invalid_json,
            self.wrong_shape,
            self.too_deep,
            self.valid,
        ]

    def sentinel_params(self) -> dict[str, Any]:
        return {}

    def wrap(self, body: bytes) -> bytes:
        return body + b"\n"

    def bit_flips(self) -> bytes:
        data = bytearray(orjson.dumps(self._message()))
        for _ in range(self.random.randint(1, 4)):
            data[self.random.randrange(len(data))] ^= 1 << self.random.randrange(8)
        return self.wrap(bytes(data))

    def truncated_body(self) -> bytes:
        body = orjson.dumps(self._message())
        return self.wrap(body[: self.random.randrange(1, len(body))])

    def crlf_and_blank_lines(self) -> bytes:
        body = orjson.dumps(self._message())
        before = self.random.choice([b"", b"\n", b"\r\n", b"   \n", b"\t"])
        return before + body + self.random.choice([b"\r\n", b"\n\n", b" \n"])

    def garbage(self) -> bytes:
        pieces = [self.random.randbytes(self.random.randint(1, 64)), b"{", b"\x00\xff", b"}"]
        return self.wrap(b"".join(self.random.choices(pieces, k=self.random.randint(1, 6))))

    def two_on_a_line(self) -> bytes:
        return self.wrap(orjson.dumps(self._message()) + orjson.dumps(self._message()))

    def _message(self) -> dict[str, Any]:
        """A valid request or notification that changes nothing that lasts."""
        self._next_id += 1
        msg_id: Any = self.random.choice([self._next_id, f"m-{self._next_id}"])
        sid = self.session_id
        text = [{"type": "text", "text": "hi"}]
        method, params = self.random.choice(
            [
                ("session/list", {}),
                ("session/list", {"cwd": "not/absolute"}),
                ("session/prompt", {"sessionId": "no-such-session", "prompt": text}),
                ("session/set_mode", {"sessionId": "no-such-session", "modeId": "ask"}),
                ("session/cancel", {"sessionId": "no-such-session"}),
                ("session/resume", {"sessionId": sid}),
                ("authenticate", {"methodId": "none"}),
                ("no/such/method", {"x": [1, 2, 3]}),
                ("session/prompt", {"sessionId": sid, "prompt": [{"type": "nobody"}]}),
            ]
        )
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if self.random.random() < 0.9:
            message["id"] = msg_id
        return message

    def _wrong_shapes(self) -> list[Any]:
        return [
            [],
            [{"jsonrpc": "2.0", "id": 1, "method": "session/list"}],
            None,
            "a string",
            12,
            {},
            {"jsonrpc": "1.0", "id": 1, "method": "session/list"},
            {"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/list"},
            {"jsonrpc": "2.0", "id": [1], "method": "session/list"},
            {"jsonrpc": "2.0", "id": True, "method": "session/list"},
            {"jsonrpc": "2.0", "id": 1.5, "method": "session/list"},
            {"jsonrpc": "2.0", "id": None, "method": "session/list"},
            {"jsonrpc": "2.0", "id": 3, "method": 42},
            {"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": ["x"]},
            {"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": "x"},
            {"jsonrpc": "2.0", "id": 6, "method": "session/prompt", "params": {"sessionId": 7}},
            {"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": {"cwd": 1}},
            {"jsonrpc": "2.0", "id": 8, "method": "session/load", "params": {"cwd": "x"}},
            {"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": 1}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": [1]}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": None}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": [1]},
            {"jsonrpc": "2.0", "method": "$/cancel_request"},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 123456789}},
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": [1]}},
            {"jsonrpc": "2.0", "method": "session/cancel"},
            {"jsonrpc": "2.0", "id": "tether-999", "result": {"outcome": "selected"}},
            {"jsonrpc": "2.0", "id": 77, "error": {"code": "x"}},
            {"jsonrpc": "2.0", "id": 78},
            {"deep": self._deep(200)},
        ]


# -- the driver --------------------------------------------------------------------------------


def busy_script(path: Path, turns: int, delay: float) -> dict[str, Any]:
    """``initializationOptions`` for runs that keep going: each turn streams a little text,
    waits ``delay`` seconds and calls ``state_get`` (a tool that needs no approval)."""
    turn = {"text": "still working", "toolCalls": [{"name": "state_get"}], "delay": delay}
    path.write_text(json.dumps([turn] * turns))
    return scripted_options(path)


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak) of a process, in KiB, from ``/proc``."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


class WireClient:
    """A raw client on a byte stream: every frame (with ``ndjson``, every line) the server
    writes is checked and counted."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, ndjson: bool = False
    ) -> None:
        self.writer = writer
        self.ndjson = ndjson
        self.answers: Counter[Any] = Counter()  # responses per id
        self.deep_codes: dict[str, int] = {}  # the error codes of requests nested too deep
        self.bad_output: list[str] = []
        self._waiting: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._ids = 0
        self._reader = asyncio.ensure_future(
            self._read_lines(reader) if ndjson else self._read(reader)
        )

    def wrap(self, body: bytes) -> bytes:
        return body + b"\n" if self.ndjson else encode_frame(body)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = FrameDecoder(max_body=1 << 40)
        while chunk := await reader.read(1 << 16):
            for item in decoder.feed(chunk):
                if not isinstance(item, Frame):
                    self.bad_output.append(f"bad frame: {item.reason}")
                    continue
                try:
                    message = orjson.loads(item.body)
                except orjson.JSONDecodeError:
                    self.bad_output.append(f"not JSON: {bytes(item.body[:80])!r}")
                    continue
                self._receive(message)
        if decoder.buffered:
            self.bad_output.append(f"{decoder.buffered} bytes of an unfinished frame")

    async def _read_lines(self, reader: asyncio.StreamReader) -> None:
        rest = b""
        while chunk := await reader.read(1 << 16):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    self.bad_output.append(f"not JSON: {line[:80]!r}")
                    continue
                self._receive(message)
        if rest:
            self.bad_output.append(f"{len(rest)} bytes of an unfinished line")

    def _receive(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.bad_output.append(f"not a JSON-RPC message: {str(message)[:80]}")
            return
        if "method" in message:
            return  # a notification (progress of the runs)
        msg_id = message.get("id")
        if not isinstance(msg_id, str | int):
            return  # id null: a parse error or an invalid request
        self.answers[msg_id] += 1
        if str(msg_id).startswith(DEEP):
            self.deep_codes[str(msg_id)] = message.get("error", {}).get("code", 0)
        waiter = self._waiting.pop(msg_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(message)

    def expect(self, msg_id: Any) -> asyncio.Future[dict[str, Any]]:
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = waiter
        return waiter

    def start(self, method: str, params: Any) -> asyncio.Future[dict[str, Any]]:
        self._ids += 1
        msg_id = f"client-{self._ids}"
        waiter = self.expect(msg_id)
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        self.writer.write(self.wrap(orjson.dumps(message)))
        return waiter

    def notify(self, method: str, params: Any) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        self.writer.write(self.wrap(orjson.dumps(message)))

    async def call(self, method: str, params: Any) -> Any:
        reply = await asyncio.wait_for(self.start(method, params), 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]


@dataclass(frozen=True)
class Face:
    """What the driver needs to know of the face it fuzzes: its fuzzer, how to make a session,
    the request that runs a turn and how to stop one."""

    fuzzer: Callable[[int, str], FrameFuzzer]
    new_session: Callable[[WireClient], Awaitable[str]]
    run: Callable[[str], tuple[str, Any]]
    stop: Callable[[WireClient, str], Awaitable[None]]


async def _tether_session(client: WireClient) -> str:
    session_id: str = (await client.call("session/create", {"title": "fuzz"}))["sessionId"]
    return session_id


async def _tether_stop(client: WireClient, session_id: str) -> None:
    await client.call("kernel/cancel", {"sessionId": session_id})


TETHER = Face(
    fuzzer=FrameFuzzer,
    new_session=_tether_session,
    run=lambda sid: ("kernel/run", {"sessionId": sid, "prompt": "go", "maxIterations": 1000}),
    stop=_tether_stop,
)
"""``tether serve``: LSP framing, ``kernel/run`` turns stopped by ``kernel/cancel``."""


def acp_face(workspace: Path) -> Face:
    """``tether acp`` in ``workspace``: NDJSON, ``session/prompt`` turns (each runs up to the
    configured number of model calls) stopped by ``session/cancel``."""

    async def new_session(client: WireClient) -> str:
        params = {"cwd": str(workspace), "mcpServers": []}
        session_id: str = (await client.call("session/new", params))["sessionId"]
        return session_id

    async def stop(client: WireClient, session_id: str) -> None:
        client.notify("session/cancel", {"sessionId": session_id})

    prompt = [{"type": "text", "text": "go"}]
    return Face(
        fuzzer=LineFuzzer,
        new_session=new_session,
        run=lambda sid: ("session/prompt", {"sessionId": sid, "prompt": prompt}),
        stop=stop,
    )


@dataclass
class FuzzReport:
    seed: int
    frames: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    sentinels: int = 0
    unanswered: list[str] = field(default_factory=list)
    answered_twice: list[str] = field(default_factory=list)
    bad_output: list[str] = field(default_factory=list)
    runs_started: int = 0
    runs_answered: int = 0
    memory_before: dict[str, int] = field(default_factory=dict)
    memory_after: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.unanswered or self.answered_twice or self.bad_output)


class _Runs:
    """``kernel/run``s kept in flight: one per session, started again when one ends."""

    def __init__(
        self, client: WireClient, face: Face, sessions: list[str], report: FuzzReport
    ) -> None:
        self._client, self._face, self._report = client, face, report
        self._sessions = sessions
        self._running: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.stopping = False

    def keep_going(self) -> None:
        for session_id in self._sessions:
            run = self._running.get(session_id)
            if run is not None and run.done():
                self._report.runs_answered += 1
            if not self.stopping and (run is None or run.done()):
                method, params = self._face.run(session_id)
                self._running[session_id] = self._client.start(method, params)
                self._report.runs_started += 1

    async def stop(self) -> None:
        self.stopping = True
        for session_id in self._sessions:
            await self._face.stop(self._client, session_id)
        await asyncio.wait_for(asyncio.gather(*self._running.values()), 30)
        self._report.runs_answered += len(self._running)


async def fuzz(
    client: WireClient,
    pid: int,
    *,
    seed: int,
    frames: int,
    runs: int = 2,
    sentinel_every: int = 10,
    window: int = 8,
    face: Face = TETHER,
) -> FuzzReport:
    """Send ``frames`` mutated chunks with a sentinel every ``sentinel_every``, ``runs`` runs in
    flight; the server must run :func:`busy_script`'s script."""
    report = FuzzReport(seed=seed)
    target = await face.new_session(client)
    run_sessions = [await face.new_session(client) for _ in range(runs)]
    in_flight = _Runs(client, face, run_sessions, report)
    in_flight.keep_going()
    fuzzer = face.fuzzer(seed, target)
    outstanding: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
    report.memory_before = memory_kib(pid)
    started = time.perf_counter()
    for n in range(1, frames + 1):
        client.writer.write(fuzzer.mutated())
        report.frames += 1
        if n % sentinel_every == 0 or n == frames:
            msg_id, frame = fuzzer.sentinel()
            outstanding.append((msg_id, client.expect(msg_id)))
            client.writer.write(frame)
            report.sentinels += 1
            await client.writer.drain()
            while len(outstanding) > window:
                await _settle(outstanding.pop(0), report)
            in_flight.keep_going()
    for sentinel in outstanding:
        await _settle(sentinel, report)
    for msg_id in fuzzer.deep_ids:  # answered before the sentinels that followed them
        code = client.deep_codes.get(msg_id)
        if code is None:
            report.unanswered.append(msg_id)
        elif code != ErrorCode.INVALID_REQUEST:
            report.bad_output.append(f"{msg_id} answered {code}")
    report.seconds = time.perf_counter() - started
    report.kinds = fuzzer.sent
    await in_flight.stop()
    report.memory_after = memory_kib(pid)
    report.answered_twice = [
        str(i) for i, count in client.answers.items() if count > 1 and str(i).startswith(_OURS)
    ]
    report.bad_output = list(client.bad_output)
    return report


_OURS = (SENTINEL, DEEP, "client-")


async def _settle(sentinel: tuple[str, asyncio.Future[Any]], report: FuzzReport) -> None:
    msg_id, answer = sentinel
    try:
        reply = await asyncio.wait_for(answer, 30)
    except TimeoutError:
        report.unanswered.append(msg_id)
        return
    if "result" not in reply:
        report.bad_output.append(f"{msg_id} answered {reply.get('error')}")


@dataclass
class Served:
    """A ``tether serve`` process and a client connected to it, over stdio or TCP."""

    process: asyncio.subprocess.Process
    client: WireClient
    stderr: Any

    async def close(self) -> int:
        """``shutdown`` then ``exit`` (ACP: stdin closed); the exit code."""
        if self.client.ndjson:
            self.client.writer.close()
            code = await asyncio.wait_for(self.process.wait(), 30)
            self.stderr.close()
            return code
        await self.client.call("shutdown", None)
        self.client.writer.write(encode_frame(b'{"jsonrpc":"2.0","method":"exit"}'))
        code = await asyncio.wait_for(self.process.wait(), 30)
        self.stderr.close()
        return code


async def serve(
    argv: list[str], workspace: Path, options: dict[str, Any], *, tcp: bool, log: Path
) -> Served:
    """Start ``argv`` (``... serve``), with ``--tcp`` on a free port if asked, and initialize it.

    The server's stderr goes to ``log``: a pipe nobody reads would stall a server that logs.
    """
    stderr = log.open("wb")
    if not tcp:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
        assert process.stdin is not None and process.stdout is not None
        client = WireClient(process.stdout, process.stdin)
    else:
        port = _free_port()
        process = await asyncio.create_subprocess_exec(
            *argv, "--tcp", f"127.0.0.1:{port}", stdin=asyncio.subprocess.DEVNULL, stderr=stderr
        )
        reader, tcp_writer = await _connect(port)
        client = WireClient(reader, tcp_writer)
    params = {"workspaceFolders": [{"uri": workspace.as_uri()}], "initializationOptions": options}
    await client.call("initialize", params)
    client.writer.write(encode_frame(b'{"jsonrpc":"2.0","method":"initialized","params":{}}'))
    return Served(process, client, stderr)


async def serve_acp(argv: list[str], workspace: Path, script: Path, *, log: Path) -> Served:
    """Start ``argv`` (``... acp``) in ``workspace`` with the scripted model playing ``script``
    (a user config under ``log``'s directory), and initialize it."""
    home = log.parent / "acp-home"
    config = home / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[provider]\ntype = "scripted"\nscript = {json.dumps(str(script))}\n')
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    stderr = log.open("wb")
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        cwd=workspace,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    client = WireClient(process.stdout, process.stdin, ndjson=True)
    await client.call("initialize", {"protocolVersion": 1})
    return Served(process, client, stderr)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(30):
        while True:
            try:
                return await asyncio.open_connection("127.0.0.1", port)
            except ConnectionRefusedError:
                await asyncio.sleep(0.05)  # the server is still starting: poll its port
