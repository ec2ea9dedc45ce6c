"""What the HTTP providers share: one POST per turn, read as server-sent events, with retries.

A subclass maps a :class:`ModelRequest` to its JSON payload (and, when its format names the
model in the URL, to its ``request_url``) and supplies a :class:`TurnReader` that turns the
events of its wire format into text pieces, reasoning pieces and, at the end, a
:class:`Completion`.
A server that answers with plain JSON although streaming was asked for is read as a whole turn;
any other content type is read as an event stream, one read of the body at a time: the pieces a
read brings go on together (:func:`read_pieces`), and none waits for the next read.

``timeout`` bounds each wait on the network: connecting, sending, and the gap between two pieces
of the answer (a slow but steady stream is not cut off). Once a turn is complete, what is left of
the body is read (briefly: :func:`finish_body`; not at all when it has all arrived), so that its
connection is reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

import aiohttp
import httpx
import orjson
from multidict import CIMultiDict

from tether.providers.base import (
    Completion,
    ModelRequest,
    Provider,
    StreamEvent,
    TextDelta,
    ThoughtDelta,
)
from tether.providers.client import Client, DirectResponse, make_client
from tether.providers.errors import AttemptFailed
from tether.providers.prepare import prepare
from tether.providers.retry import BODY_LIMIT, RetryPolicy, parse_retry_after, with_retries
from tether.providers.sse import EventDecoder, ServerSentEvent
from tether.secrets import shown_url


@dataclass(frozen=True, kw_only=True)
class ModelListing:
    """What the endpoint's model list answered (:meth:`HttpProvider.list_models`)."""

    url: str
    status: int
    models: tuple[str, ...] = ()  # the model names, when it answered with a list


log = logging.getLogger(__name__)

FINISH_SECONDS = 0.5  # the most a finished turn waits for the rest of its body
URLS_KEPT = 64  # parsed request URLs a provider keeps


class Answer(Protocol):
    """What a provider reads of a response: an ``httpx.Response``, or a
    :class:`~tether.providers.client.DirectResponse` when the POST went to aiohttp straight."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def is_success(self) -> bool: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


class TurnReader(ABC):
    """Reads one streamed turn of a wire format."""

    done: bool = False  # set when the stream said its turn is over

    @abstractmethod
    def feed(self, event: ServerSentEvent) -> str | None:
        """Take one event; return the text piece it carries, if any."""

    def thoughts(self) -> list[str]:
        """The reasoning pieces the events fed since the last call carried (taken once)."""
        return []

    @abstractmethod
    def completion(self) -> Completion:
        """The whole turn; raises AttemptFailed when the stream stopped before its end."""

    @abstractmethod
    def whole(self, body: Any) -> Completion:
        """The turn from a non-streamed JSON answer."""


def decode_json(text: str | bytes) -> Any:
    """Parsed JSON of a piece of the answer; a broken piece makes the try fail for good."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise AttemptFailed(
            "the endpoint sent invalid JSON",
            retryable=False,
            body=text[:BODY_LIMIT] if isinstance(text, str) else text[:BODY_LIMIT].decode(),
        ) from None


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: odd servers do not break a reader."""
    return value if isinstance(value, dict) else {}


def index_of(value: Any, default: int) -> int:
    """A block or call index, or ``default`` when the server sent none (or nonsense)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _millis(since: float) -> float:
    return (time.perf_counter() - since) * 1000


def transport_failure(exc: httpx.HTTPError) -> AttemptFailed:
    """A network error as a failed try: timeouts and lost connections may be tried again."""
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return AttemptFailed(f"the request timed out ({detail})", retryable=True)
    if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError):
        return AttemptFailed(f"the connection failed ({detail})", retryable=True)
    return AttemptFailed(f"the request failed ({detail})", retryable=False)


async def finish_body(rest: AsyncIterator[object]) -> None:
    """Read what follows the end of a turn (as a rule, only the end of the chunked body) so that
    the connection goes back to the pool instead of being closed. A server that keeps the stream
    open after the turn is left after ``FINISH_SECONDS``; its connection is then closed."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(FINISH_SECONDS):
            async for _ in rest:
                pass


async def read_head(response: Answer) -> str:
    """The first ``BODY_LIMIT`` bytes of a response body, as text."""
    head = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            head += chunk
            if len(head) >= BODY_LIMIT:
                break
    except httpx.HTTPError:
        pass  # what arrived is enough to report
    return head[:BODY_LIMIT].decode("utf-8", "replace")


async def event_lists(chunks: AsyncIterator[bytes]) -> AsyncGenerator[list[ServerSentEvent], None]:
    """The events each read of the body completes (often none), then those its end completes."""
    decoder = EventDecoder()
    async for chunk in chunks:
        yield decoder.feed(chunk)
    yield decoder.end()


def read_pieces(
    reader: TurnReader, events: list[ServerSentEvent]
) -> tuple[list[StreamEvent], AttemptFailed | None]:
    """What ``events`` (those one read of the body completed) carry, as few deltas as can say
    it: consecutive pieces of the same kind are joined, so the text and the reasoning read the
    same when concatenated and keep their order. The reader stops taking events once its turn is
    done. An event that fails the try ends the list; its failure is returned with what came before
    it, which the caller still passes on first (it counts as streamed, as it would have had it
    arrived in a read of its own).
    """
    kinds: list[type[TextDelta | ThoughtDelta]] = []
    texts: list[list[str]] = []

    def add(kind: type[TextDelta | ThoughtDelta], text: str) -> None:
        if kinds and kinds[-1] is kind:
            texts[-1].append(text)
        else:
            kinds.append(kind)
            texts.append([text])

    failure: AttemptFailed | None = None
    try:
        for event in events:
            text = reader.feed(event)
            for thought in reader.thoughts():
                add(ThoughtDelta, thought)
            if text:
                add(TextDelta, text)
            if reader.done:
                break
    except AttemptFailed as exc:
        failure = exc
    pieces: list[StreamEvent] = [
        kind(text=parts[0] if len(parts) == 1 else "".join(parts))
        for kind, parts in zip(kinds, texts, strict=True)
    ]
    return pieces, failure


class HttpProvider(Provider):
    """A provider that POSTs each turn to ``url`` over a (usually shared) ``httpx.AsyncClient``."""

    name: str

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        client: httpx.AsyncClient | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = url
        self.model = model  # the configured model, for callers that build requests
        self._headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            **headers,
        }
        self._secret = api_key
        self._own_client = client is None
        self._client = client if client is not None else make_client()
        self._timeout = httpx.Timeout(timeout)
        self._extensions = {"timeout": self._timeout.as_dict()}
        self._direct_timeout = aiohttp.ClientTimeout(  # as httpx-aiohttp maps httpx's
            sock_connect=self._timeout.connect,
            sock_read=self._timeout.read,
            connect=self._timeout.pool,
        )
        self._merged: httpx.Headers | None = None  # the client's headers, then these
        self._merged_direct: CIMultiDict[str] | None = None  # the same, as aiohttp takes them
        self._urls: dict[str, httpx.URL] = {}  # parsed once: parsing costs ~40 µs per request
        self.retry = retry if retry is not None else RetryPolicy()

    @abstractmethod
    def payload(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of the request, in the provider's wire format."""

    @abstractmethod
    def reader(self) -> TurnReader:
        """A fresh reader for one turn."""

    def request_url(self, request: ModelRequest) -> str:
        """Where ``request`` is POSTed: ``url``, unless the wire format names the model in it."""
        return self.url

    @abstractmethod
    def models_url(self) -> str:
        """Where the endpoint lists its models (``GET``)."""

    @abstractmethod
    def model_names(self, body: Any) -> tuple[str, ...]:
        """The model names of a model list, as ``provider.model`` spells them."""

    async def list_models(self, *, seconds: float) -> ModelListing:
        """The endpoint's model list, asked once (no retries), with the provider's key: how
        ``tether doctor`` tells an unreachable endpoint, a refused key and an unknown model apart.
        Raises ``httpx.HTTPError`` when the endpoint cannot be reached."""
        url = self.models_url()
        headers = {k: v for k, v in self._headers.items() if k != "content-type"}
        headers["accept"] = "application/json"
        started = time.perf_counter()
        try:
            response = await self._client.get(url, headers=headers, timeout=seconds)
        except httpx.HTTPError as exc:
            log.debug(
                "%s: GET %s failed after %.0f ms: %s",
                self.name,
                shown_url(url),
                _millis(started),
                type(exc).__name__,
            )
            raise
        log.debug(
            "%s: GET %s -> %d in %.0f ms",
            self.name,
            shown_url(url),
            response.status_code,
            _millis(started),
        )
        if not response.is_success:
            return ModelListing(url=url, status=response.status_code)
        try:
            names = self.model_names(decode_json(response.content))
        except (ValueError, TypeError, KeyError, AttributeError):
            names = ()
        return ModelListing(url=url, status=response.status_code, models=names)

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """The turn's events (see :meth:`turn`); its payload is built as this is called."""
        return self.turn(
            self.request_url(request), self.payload(prepare(request, self.capabilities))
        )

    def turn(self, url: str, payload: dict[str, Any]) -> AsyncGenerator[StreamEvent, None]:
        """One turn POSTed to ``url``, with retries: the events of :func:`with_retries` itself,
        not re-yielded by a generator of its own (each layer costs every event a step)."""
        body = orjson.dumps(payload)
        return with_retries(
            lambda: self._attempt(url, body),
            self.retry,
            provider=self.name,
            secret=self._secret,
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def _attempt(self, url: str, body: bytes) -> AsyncGenerator[StreamEvent, None]:
        reader = self.reader()
        started = time.perf_counter()
        try:
            async with self._open(url, body) as response:
                if "json" not in response.headers.get("content-type", ""):
                    # typed as an iterator, made by an async generator: closed when left early
                    chunks = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
                    async with aclosing(chunks), aclosing(event_lists(chunks)) as reads:
                        async for events in reads:
                            pieces, failure = read_pieces(reader, events)
                            for piece in pieces:
                                yield piece
                            if failure is not None:
                                raise failure
                            if reader.done:
                                break
                        completion = reader.completion()
                        if not (isinstance(response, DirectResponse) and response.at_end()):
                            await finish_body(chunks)
                else:
                    completion = reader.whole(decode_json(await response.aread()))
                    if completion.reasoning:
                        yield ThoughtDelta(text=completion.reasoning)
                    if completion.content:
                        yield TextDelta(text=completion.content)
        except httpx.HTTPError as exc:
            failure = transport_failure(exc)
            log.debug(
                "%s: POST %s failed after %.0f ms: %s",
                self.name,
                shown_url(url),
                _millis(started),
                failure.message,
            )
            raise failure from exc
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: POST %s: the turn was read in %.0f ms",
                self.name,
                shown_url(url),
                _millis(started),
            )
        yield completion  # after the response is closed: a caller may stop at the completion

    def _merged_headers(self) -> httpx.Headers:
        """The client's headers, then the provider's, merged once per provider instead of per
        request (~40 µs of a request's ~60 µs there): the client's headers do not change once it
        is made."""
        merged = self._merged
        if merged is None:
            merged = self._merged = httpx.Headers(self._client.headers)
            merged.update(self._headers)
        return merged

    def _request(self, url: httpx.URL, body: bytes) -> httpx.Request:
        """The POST of one try, as ``client.build_request`` makes it (the client's headers, then
        the provider's; its cookies; the timeout). The client has no base URL or query
        parameters to merge."""
        request = httpx.Request(
            "POST",
            url,
            content=body,
            headers=self._merged_headers(),
            extensions=dict(self._extensions),
        )
        cookies = self._client.cookies
        if cookies:
            cookies.set_cookie_header(request)
        return request

    @asynccontextmanager
    async def _open(self, url: str, body: bytes) -> AsyncIterator[Answer]:
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= URLS_KEPT:  # a format that names the model in the URL
                self._urls.clear()
            parsed = self._urls[url] = httpx.URL(url)
        started = time.perf_counter()
        response = await self._send(parsed, body)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: POST %s (%d bytes) -> %d in %.0f ms",
                self.name,
                shown_url(str(parsed)),
                len(body),
                response.status_code,
                _millis(started),
            )
        try:
            if not response.is_success:
                status = response.status_code
                raise AttemptFailed(
                    f"HTTP {status}",
                    retryable=status == 429 or status >= 500,
                    status=status,
                    body=await read_head(response),
                    retry_after=parse_retry_after(response.headers),
                )
            yield response
        finally:
            await response.aclose()

    async def _send(self, url: httpx.URL, body: bytes) -> Answer:
        """The POST of one try, streamed: straight through aiohttp when the client is tether's
        own and nothing of httpx's would change the request (:meth:`Client.post_direct`), else
        sent by httpx."""
        client = self._client
        if isinstance(client, Client):
            direct = await client.post_direct(
                url, body, self._merged_headers(), self._direct_timeout
            )
            if direct is not None:
                return direct
        return await client.send(self._request(url, body), stream=True)
