"""A real loopback HTTP server that plays a model endpoint, for tests and benchmarks.

It speaks the OpenAI Chat Completions format (``POST .../chat/completions``), the Anthropic
Messages format (``POST .../messages``) and the Gemini format (``POST .../models/M:generateContent``
or ``:streamGenerateContent?alt=sse``), streamed as server-sent events or as one JSON answer, as
the request asks. Each test queues what the next requests get::

    async with ModelServer() as server:
        server.push(Reply(text="Hello"), Status(429, retry_after="1"), Hang())
        provider = OpenAIProvider(base_url=server.openai_url, ...)

A :class:`Reply` is rendered in the format of the request that takes it, so one script serves
every provider; its ``thinking`` streams as the format's reasoning (OpenAI-compatible
``reasoning_content``, an Anthropic ``thinking`` block with a signature, Gemini ``thought`` parts
with a ``thoughtSignature`` on the first call).

Faults: :class:`Status` (429 with ``Retry-After``, 500, ...), :class:`Hang` (no answer, or a
stream that stalls), :class:`Reset` (the connection reset, before the answer or in the middle of
the stream), :class:`Truncate` (the stream ends in the middle of an event), and a malformed tool
call is a :class:`Call` whose ``arguments`` are broken JSON. ``latency`` delays
every answer. When the queue is empty, ``default`` answers, or a 400 that names the problem.

``GET .../models`` lists ``models`` in a body every provider's format reads (``data[].id`` for
OpenAI-compatible and Anthropic, ``models[].name`` for Gemini); with ``api_key`` set, a listing
asked with another key (bearer, ``x-api-key`` or ``x-goog-api-key``) gets a 401.

For a subprocess (the real ``tether serve``), run it in a thread::

    with ModelServer.in_thread(latency=0.05) as server:
        spawn(..., base_url=server.openai_url)

Every request is recorded in ``requests`` (method, path, lower-case headers, parsed JSON body);
``connections`` counts the connections accepted and ``closed`` those that have ended since (a
stalled answer ends as soon as its client hangs up), so a test can tell whether a client reuses
its connections and lets go of a stream it gives up.
Minimal HTTP/1.1 by hand over ``asyncio.start_server``: keep-alive, Content-Length or chunked
request bodies, chunked streamed answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Format = Literal["openai", "anthropic", "gemini"]

_WORD = re.compile(r"\s*\S+\s*")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}


# --- what a request gets ----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A tool call in a reply; ``arguments`` as text may be broken JSON on purpose."""

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    id: str | None = None

    @property
    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A model turn: text (streamed word by word) and/or tool calls."""

    text: str = ""
    tool_calls: Sequence[Call] = ()
    usage: tuple[int, int] | None = (12, 7)  # (input, output) tokens; None: no usage at all
    stream: bool | None = None  # None: as the request asks
    finish_reason: str | None = None  # default: the format's word for "stop" or "tool calls"
    argument_pieces: int = 3  # tool-call arguments arrive in this many deltas ...
    whole_tool_calls: bool = False  # ... or every call whole, in one delta (OpenAI)
    interleave: bool = False  # deltas of parallel calls alternate (OpenAI)
    omit_tool_call_ids: bool = False  # like some OpenAI-compatible servers
    done_marker: bool = True  # OpenAI: end with ``data: [DONE]``
    thinking: str = ""  # reasoning streamed before the text (word by word)
    reasoning_tokens: int | None = None  # reported in the usage when set
    cached_tokens: int | None = None  # reported in the usage when set
    end_after: float = 0.0  # seconds between the last event and the end of the body ...
    linger: bool = False  # ... or the body never ends: the stream stays open after the turn
    # Each event after the first is sent once an item is taken from this queue (the test's
    # go-ahead; a server on the test's own loop only): the events arrive one read at a time.
    pace: asyncio.Queue[None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Status:
    """An HTTP error; ``body`` defaults to an error object in the request's format."""

    status: int
    retry_after: str | None = None
    body: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Never answer; with ``after_text``, stream that text first and then stall."""

    after_text: str | None = None


@dataclass(frozen=True)
class Reset:
    """Reset the connection: before answering, or after streaming ``after_text``."""

    after_text: str | None = None


@dataclass(frozen=True)
class Truncate:
    """Stream ``after_text``, then half an event, then end the body as if all was sent."""

    after_text: str = ""


@dataclass(frozen=True)
class Raw:
    """Bytes sent as they are, for what the other responses cannot say."""

    body: str | bytes
    content_type: str = "text/event-stream"
    status: int = 200


Response = Reply | Status | Hang | Reset | Truncate | Raw


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any  # the parsed JSON, or None
    raw: bytes

    @property
    def format(self) -> Format | None:
        return _format_of(self.path)


def _format_of(path: str) -> Format | None:
    path = path.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return "gemini"
    return None


# --- the wire formats -------------------------------------------------------------------------


def _pieces(text: str, count: int) -> list[str]:
    if count <= 1 or len(text) <= 1:
        return [text]
    size = -(-len(text) // count)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(data: Any, event: str | None = None) -> str:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


class _OpenAI:
    def __init__(self, request: RecordedRequest) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        self.model = body.get("model", "fake-model")
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def streams(self, request: RecordedRequest) -> bool:
        return isinstance(request.body, dict) and bool(request.body.get("stream"))

    def _chunk(self, choices: list[Any], usage: Any = None) -> str:
        chunk: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            chunk["usage"] = usage
        return _sse(chunk)

    def _delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return self._chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

    def prefix(self, text: str) -> list[str]:
        events = [self._delta({"role": "assistant", "content": ""})]
        events += [self._delta({"content": piece}) for piece in _WORD.findall(text)]
        return events

    def events(self, reply: Reply) -> list[str]:
        thoughts = [self._delta({"reasoning_content": p}) for p in _WORD.findall(reply.thinking)]
        events = thoughts + self.prefix(reply.text) + self._tool_events(reply)
        events.append(self._delta({}, self._finish_reason(reply)))
        if reply.usage is not None and self.include_usage:
            events.append(self._chunk([], self._usage(reply)))
        if reply.done_marker:
            events.append(_sse("[DONE]"))
        return events

    def _tool_events(self, reply: Reply) -> list[str]:
        per_call: list[list[dict[str, Any]]] = []
        for index, call in enumerate(reply.tool_calls):
            head: dict[str, Any] = {"index": index, "type": "function"}
            if not reply.omit_tool_call_ids:
                head["id"] = _call_id(call, index)
            arguments = call.arguments_text
            if reply.whole_tool_calls:
                head["function"] = {"name": call.name, "arguments": arguments}
                per_call.append([head])
                continue
            head["function"] = {"name": call.name, "arguments": ""}
            rest = [
                {"index": index, "function": {"arguments": piece}}
                for piece in _pieces(arguments, reply.argument_pieces)
            ]
            per_call.append([head, *rest])
        if reply.whole_tool_calls and per_call:
            return [self._delta({"tool_calls": [calls[0] for calls in per_call]})]
        if reply.interleave:
            order = [d for row in _zip_longest(per_call) for d in row]
        else:
            order = [d for calls in per_call for d in calls]
        return [self._delta({"tool_calls": [d]}) for d in order]

    def partial(self) -> str:
        return 'data: {"id":"chatcmpl-fake","choices":[{"index":0,"delta":{"content":"cut off'

    def whole(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.thinking:
            message["reasoning_content"] = reply.thinking
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": _call_id(call, index),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text},
                }
                for index, call in enumerate(reply.tool_calls)
            ]
        body: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": self._finish_reason(reply)}
            ],
        }
        if reply.usage is not None:
            body["usage"] = self._usage(reply)
        return body

    def error(self, status: int) -> dict[str, Any]:
        return {"error": {"message": f"fake error {status}", "type": "fake", "code": status}}

    def _usage(self, reply: Reply) -> dict[str, Any]:
        assert reply.usage is not None
        prompt, completion = reply.usage
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if reply.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        return usage

    def _finish_reason(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


class _Anthropic:
    def __init__(self, request: RecordedRequest) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        self.model = body.get("model", "fake-model")
        self.cached_tokens: int | None = None

    def streams(self, request: RecordedRequest) -> bool:
        return isinstance(request.body, dict) and bool(request.body.get("stream"))

    def _start(self, reply_usage: tuple[int, int] | None) -> str:
        usage = {"input_tokens": reply_usage[0], "output_tokens": 1} if reply_usage else {}
        if reply_usage and self.cached_tokens is not None:
            usage["cache_read_input_tokens"] = self.cached_tokens
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return _sse({"type": "message_start", "message": message}, "message_start")

    def prefix(
        self, text: str, usage: tuple[int, int] | None = (12, 7), thinking: str = ""
    ) -> list[str]:
        events = [self._start(usage)]
        at = 0
        if thinking:
            events += self._thinking(thinking)
            at = 1
        if text:
            block = {"type": "text", "text": ""}
            events.append(
                _sse(
                    {"type": "content_block_start", "index": at, "content_block": block},
                    "content_block_start",
                )
            )
            events.append(_sse({"type": "ping"}, "ping"))
            events += [
                _sse(
                    {
                        "type": "content_block_delta",
                        "index": at,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                    "content_block_delta",
                )
                for piece in _WORD.findall(text)
            ]
        return events

    def events(self, reply: Reply) -> list[str]:
        self.cached_tokens = reply.cached_tokens
        events = self.prefix(reply.text, reply.usage, reply.thinking)
        index = 1 if reply.thinking else 0
        if reply.text:
            events.append(_stop(index))
            index += 1
        for number, call in enumerate(reply.tool_calls):
            block = {"type": "tool_use", "id": _call_id(call, number), "name": call.name}
            events.append(
                _sse(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {**block, "input": {}},
                    },
                    "content_block_start",
                )
            )
            for piece in ["", *_pieces(call.arguments_text, reply.argument_pieces)]:
                delta = {"type": "input_json_delta", "partial_json": piece}
                events.append(
                    _sse(
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        "content_block_delta",
                    )
                )
            events.append(_stop(index))
            index += 1
        message_delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": self._stop_reason(reply), "stop_sequence": None},
        }
        if reply.usage is not None:
            message_delta["usage"] = {"output_tokens": reply.usage[1]}
        events.append(_sse(message_delta, "message_delta"))
        events.append(_sse({"type": "message_stop"}, "message_stop"))
        return events

    def _thinking(self, text: str) -> list[str]:
        """A thinking block at index 0 (text blocks then start at 1)."""
        block = {"type": "thinking", "thinking": ""}
        events = [
            _sse(
                {"type": "content_block_start", "index": 0, "content_block": block},
                "content_block_start",
            )
        ]
        deltas: list[dict[str, Any]] = [
            {"type": "thinking_delta", "thinking": piece} for piece in _WORD.findall(text)
        ]
        deltas.append({"type": "signature_delta", "signature": FAKE_SIGNATURE})
        events += [
            _sse({"type": "content_block_delta", "index": 0, "delta": d}, "content_block_delta")
            for d in deltas
        ]
        return [*events, _stop(0)]

    def partial(self) -> str:
        return (
            "event: content_block_delta\n"
            'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cu'
        )

    def whole(self, reply: Reply) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.thinking:
            content.append(
                {"type": "thinking", "thinking": reply.thinking, "signature": FAKE_SIGNATURE}
            )
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for number, call in enumerate(reply.tool_calls):
            try:
                arguments = json.loads(call.arguments_text)
            except ValueError:
                arguments = {}
            content.append(
                {
                    "type": "tool_use",
                    "id": _call_id(call, number),
                    "name": call.name,
                    "input": arguments,
                }
            )
        body: dict[str, Any] = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self._stop_reason(reply),
            "stop_sequence": None,
        }
        if reply.usage is not None:
            body["usage"] = {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1]}
            if reply.cached_tokens is not None:
                body["usage"]["cache_read_input_tokens"] = reply.cached_tokens
        return body

    def error(self, status: int) -> dict[str, Any]:
        kind = "rate_limit_error" if status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": f"fake error {status}"}}

    def _stop_reason(self, reply: Reply) -> str:
        return reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")


class _Gemini:
    """``generateContent`` answers: each streamed chunk a ``GenerateContentResponse``; calls
    carry no id unless the :class:`Call` names one."""

    def __init__(self, request: RecordedRequest) -> None:
        path = request.path.split("?", 1)[0]
        self.model = path.rsplit("/", 1)[-1].split(":", 1)[0] or "fake-model"

    def streams(self, request: RecordedRequest) -> bool:
        return ":streamGenerateContent" in request.path

    def _chunk(
        self,
        parts: list[dict[str, Any]],
        finish_reason: str | None = None,
        usage: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish_reason:
            candidate["finishReason"] = finish_reason
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": self.model}
        if usage is not None:
            chunk["usageMetadata"] = usage
        return chunk

    def prefix(self, text: str, thinking: str = "") -> list[str]:
        thoughts = [{"text": piece, "thought": True} for piece in _WORD.findall(thinking)]
        texts = [{"text": piece} for piece in _WORD.findall(text)]
        return [_sse(self._chunk([part])) for part in thoughts + texts]

    def events(self, reply: Reply) -> list[str]:
        events = self.prefix(reply.text, reply.thinking)
        if reply.tool_calls:
            events.append(_sse(self._chunk(self._calls(reply))))
        events.append(_sse(self._chunk([], self._finish_reason(reply), self._usage(reply))))
        return events

    def _calls(self, reply: Reply) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for number, call in enumerate(reply.tool_calls):
            try:
                args = json.loads(call.arguments_text)
            except ValueError:
                args = {}
            function: dict[str, Any] = {"name": call.name, "args": args}
            if call.id:
                function["id"] = call.id
            part: dict[str, Any] = {"functionCall": function}
            if reply.thinking and number == 0:
                part["thoughtSignature"] = FAKE_SIGNATURE
            parts.append(part)
        return parts

    def partial(self) -> str:
        return 'data: {"candidates": [{"content": {"role": "model", "parts": [{"text": "cu'

    def whole(self, reply: Reply) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if reply.thinking:
            parts.append({"text": reply.thinking, "thought": True})
        if reply.text:
            parts.append({"text": reply.text})
        parts += self._calls(reply)
        return self._chunk(parts, self._finish_reason(reply), self._usage(reply))

    def error(self, status: int) -> dict[str, Any]:
        names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}
        name = "RESOURCE_EXHAUSTED" if status == 429 else names.get(status, "INTERNAL")
        return {"error": {"code": status, "message": f"fake error {status}", "status": name}}

    def _usage(self, reply: Reply) -> dict[str, int] | None:
        if reply.usage is None:
            return None
        prompt, output = reply.usage
        usage = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": output,
            "totalTokenCount": prompt + output + (reply.reasoning_tokens or 0),
        }
        if reply.reasoning_tokens is not None:
            usage["thoughtsTokenCount"] = reply.reasoning_tokens
        if reply.cached_tokens is not None:
            usage["cachedContentTokenCount"] = reply.cached_tokens
        return usage

    def _finish_reason(self, reply: Reply) -> str:
        return reply.finish_reason or "STOP"  # Gemini says STOP after function calls too


Wire = _OpenAI | _Anthropic | _Gemini
FAKE_SIGNATURE = "c2lnbmF0dXJlLWZha2U="  # what a reasoning signature looks like: opaque base64


def _stop(index: int) -> str:
    return _sse({"type": "content_block_stop", "index": index}, "content_block_stop")


def _call_id(call: Call, index: int) -> str:
    return call.id or f"call_fake_{index}"


def _zip_longest(rows: list[list[dict[str, Any]]]) -> Iterator[list[dict[str, Any]]]:
    for position in range(max((len(row) for row in rows), default=0)):
        yield [row[position] for row in rows if position < len(row)]


# --- the server -------------------------------------------------------------------------------


class ModelServer:
    """The fake endpoint. ``url`` is its root; ``openai_url``, ``anthropic_url`` and
    ``gemini_url`` are the base URLs the providers take."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        default: Response | None = None,
        models: Sequence[str] = ("fake-model",),
        api_key: str | None = None,
    ) -> None:
        self.latency = latency
        self.default = default
        self.models = tuple(models)
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Response] = deque()
        self._lock = threading.Condition()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._readers: dict[asyncio.StreamWriter, asyncio.StreamReader] = {}
        self.connections = 0  # accepted so far
        self.closed = 0  # of those, ended since (by either side)
        self._closing: asyncio.Event | None = None
        self.port = 0

    # --- scripting and inspection (safe from any thread) ---

    def push(self, *responses: Response) -> None:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._queue.extend(responses)

    @property
    def pending(self) -> int:
        """Queued answers no request has taken yet."""
        with self._lock:
            return len(self._queue)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    @property
    def gemini_url(self) -> str:
        return self.url

    def wait_for_requests_sync(self, count: int, seconds: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` requests have arrived (TimeoutError after ``seconds``)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.requests) >= count, seconds):
                raise TimeoutError(f"{len(self.requests)} of {count} requests arrived")
            return list(self.requests)

    async def wait_for_requests(self, count: int, seconds: float = 5.0) -> list[RecordedRequest]:
        """Wait until ``count`` requests have arrived (TimeoutError after ``seconds``)."""
        return await asyncio.to_thread(self.wait_for_requests_sync, count, seconds)

    def wait_for_closed_sync(self, count: int, seconds: float = 5.0) -> None:
        """Block until ``count`` connections have ended (TimeoutError after ``seconds``)."""
        with self._lock:
            if not self._lock.wait_for(lambda: self.closed >= count, seconds):
                raise TimeoutError(f"{self.closed} of {count} connections ended")

    async def wait_for_closed(self, count: int, seconds: float = 5.0) -> None:
        """Wait until ``count`` connections have ended (TimeoutError after ``seconds``)."""
        await asyncio.to_thread(self.wait_for_closed_sync, count, seconds)

    # --- lifecycle ---

    async def __aenter__(self) -> ModelServer:
        self._closing = asyncio.Event()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._closing is not None
        self._closing.set()  # stalled answers give up
        self._server.close()
        for writer in self._connections.values():
            writer.transport.abort()  # idle keep-alive connections see the end
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        await self._server.wait_closed()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, **options: Any) -> Iterator[ModelServer]:
        """The server on its own event loop in a daemon thread, for subprocess tests."""
        server = cls(**options)
        ready = threading.Event()
        stop: list[Any] = []
        failure: list[BaseException] = []

        async def main() -> None:
            async with server:
                stopped = asyncio.Event()
                loop = asyncio.get_running_loop()
                stop.append(lambda: loop.call_soon_threadsafe(stopped.set))
                ready.set()
                await stopped.wait()

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:
                failure.append(exc)
                ready.set()

        thread = threading.Thread(target=run, name="model-server", daemon=True)
        thread.start()
        if not ready.wait(10) or failure:
            raise RuntimeError(f"the model server did not start: {failure}")
        try:
            yield server
        finally:
            stop[0]()
            thread.join(10)

    # --- HTTP ---

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        self._readers[writer] = reader
        with self._lock:
            self.connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                with self._lock:
                    self.requests.append(request)
                    self._lock.notify_all()
                if not await self._answer(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._connections.pop(task, None)
            self._readers.pop(writer, None)
            if not writer.transport.is_closing():
                writer.close()
            with self._lock:
                self.closed += 1
                self._lock.notify_all()

    def _take(self) -> Response | None:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    async def _answer(self, request: RecordedRequest, writer: asyncio.StreamWriter) -> bool:
        """Write the answer; False when the connection must not be reused."""
        kind = request.format
        if request.method == "GET" and request.path.split("?", 1)[0].endswith("/models"):
            await self._list_models(request, writer)
            return True
        if request.method != "POST" or kind is None:
            await _send(writer, 404, b'{"error": "not found"}')
            return True
        wire: Wire = (
            _OpenAI(request)
            if kind == "openai"
            else _Anthropic(request)
            if kind == "anthropic"
            else _Gemini(request)
        )
        response = self._take()
        if self.latency:
            await asyncio.sleep(self.latency)
        if response is None:
            message = f"fake model server: no scripted response left ({len(self.requests)})"
            await _send(writer, 400, json.dumps({"error": {"message": message}}).encode())
            return True
        keep = await self._respond(response, request, wire, writer)
        return keep and request.headers.get("connection", "").lower() != "close"

    async def _list_models(self, request: RecordedRequest, writer: asyncio.StreamWriter) -> None:
        headers = request.headers
        given = {
            headers.get("authorization", "").removeprefix("Bearer "),
            headers.get("x-api-key", ""),
            headers.get("x-goog-api-key", ""),
        }
        if self.api_key is not None and self.api_key not in given:
            await _send(writer, 401, b'{"error": {"message": "invalid api key"}}')
            return
        body = {
            "data": [{"id": model, "object": "model"} for model in self.models],
            "models": [{"name": f"models/{model}"} for model in self.models],
        }
        await _send(writer, 200, json.dumps(body).encode())

    async def _respond(
        self,
        response: Response,
        request: RecordedRequest,
        wire: Wire,
        writer: asyncio.StreamWriter,
    ) -> bool:
        if isinstance(response, Reply):
            asked = wire.streams(request)
            if response.stream if response.stream is not None else asked:
                end = not response.linger
                await _stream(
                    writer,
                    wire.events(response),
                    end=end,
                    end_after=response.end_after,
                    pace=response.pace,
                )
                if not end:
                    await self._stall(writer)
                    return False
            else:
                await _send(writer, 200, json.dumps(wire.whole(response)).encode())
            return True
        if isinstance(response, Status):
            headers = dict(response.headers)
            if response.retry_after is not None:
                headers["Retry-After"] = response.retry_after
            body = (
                response.body
                if response.body is not None
                else json.dumps(wire.error(response.status))
            )
            await _send(writer, response.status, body.encode(), headers)
            return True
        if isinstance(response, Raw):
            raw = response.body.encode() if isinstance(response.body, str) else response.body
            await _send(writer, response.status, raw, content_type=response.content_type)
            return True
        if isinstance(response, Truncate):
            await _stream(writer, [*wire.prefix(response.after_text), wire.partial()])
            return True
        if isinstance(response, Reset):
            if response.after_text is not None:
                await _stream(writer, wire.prefix(response.after_text), end=False)
            _reset(writer)
            return False
        assert isinstance(response, Hang)
        if response.after_text is not None:
            await _stream(writer, wire.prefix(response.after_text), end=False)
        await self._stall(writer)
        return False

    async def _stall(self, writer: asyncio.StreamWriter) -> None:
        """Wait until the server closes or the client hangs up (reads past its request)."""
        assert self._closing is not None
        waits = [asyncio.ensure_future(self._closing.wait())]
        reader = self._readers.get(writer)
        if reader is not None:
            waits.append(asyncio.ensure_future(reader.read(1)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        raw = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        raw = await _read_chunked(reader)
    else:
        raw = b""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return RecordedRequest(method=method, path=target, headers=headers, body=body, raw=raw)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Fake Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    content_type: str = "application/json",
) -> None:
    all_headers = {
        "Content-Type": content_type,
        "Content-Length": str(len(body)),
        **(headers or {}),
    }
    writer.write(_head(status, all_headers) + body)
    await writer.drain()


async def _stream(
    writer: asyncio.StreamWriter,
    events: Sequence[str],
    *,
    end: bool = True,
    end_after: float = 0.0,
    pace: asyncio.Queue[None] | None = None,
) -> None:
    """An SSE answer, one chunk per event, flushed as it goes (each after the first waiting for
    an item of ``pace``, when given); the chunk that ends the body ``end_after`` seconds after
    the last event (or none, when not ``end``)."""
    writer.write(
        _head(
            200,
            {
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "Transfer-Encoding": "chunked",
            },
        )
    )
    for index, event in enumerate(events):
        if index and pace is not None:
            await pace.get()
        data = event.encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
    if end:
        if end_after:
            await asyncio.sleep(end_after)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashed peer or a dropped proxy would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
