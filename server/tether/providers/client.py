"""The HTTP client the providers share: the httpx API over aiohttp's connection pool.

The providers are written against ``httpx.AsyncClient`` (requests, streamed responses, its
exceptions and timeouts). Its default transport, httpcore, costs several times more CPU per
streamed request than aiohttp, and its pool does work quadratic in the connections it keeps.
:func:`make_client` keeps the httpx API but hands every request to an aiohttp ``ClientSession``
through the ``httpx-aiohttp`` transport: one pool per process, idle connections reused, the
pool's bookkeeping linear in its connections.

How the transport maps what the providers rely on:

- ``httpx.Timeout``: ``connect`` and ``read`` bound each wait on the network (aiohttp's
  ``sock_connect`` and ``sock_read``: a slow but steady stream is never cut off), ``pool`` the
  wait for a free connection. There is no bound on the whole request.
- aiohttp's errors become httpx's, as httpx's own transport raises them: a connection that
  cannot be made is an ``httpx.ConnectError``, one reset or closed by the server an
  ``httpx.ReadError``, a wait that ran out an ``httpx.TimeoutException`` — all of them retried
  by :mod:`tether.providers.retry`. (``httpx-aiohttp`` reports every lost connection as a
  ``ConnectTimeout``; :class:`Transport` puts that right.)
- Closing a response before its end (a cancelled run) closes its connection, so the endpoint
  sees the stream end at once; a response read to its end gives its connection back to the pool.
- Proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``...) are honoured as httpx does.

A provider's streamed POST skips httpx's layer when nothing of it would change the request
(:meth:`Client.post_direct`): no cookies to send, no auth or event hooks, a transport of ours for
the URL and only the content codings aiohttp decodes itself. It then goes to aiohttp's session
straight, with the headers, timeouts, proxy and error mapping httpx's path gives it, and its
answer is read as a :class:`DirectResponse` (the part of ``httpx.Response`` a provider uses).
httpx's request, response and stream wrappers (three generators per chunk) cost about a fifth of
a run's CPU in a server with many runs at once.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import map_aiohttp_exceptions

DEFAULT_MAX_CONNECTIONS = 100
KEEPALIVE_SECONDS = 15.0  # idle connections are closed after this long (aiohttp's default)
DEFAULT_LIMITS = httpx.Limits(max_connections=DEFAULT_MAX_CONNECTIONS)
DECODED = frozenset({"gzip", "deflate", "identity"})  # codings aiohttp decodes without extras

_tls_context: LazyTLSContext | None = None
_tls_lock = threading.Lock()


class LazyTLSContext(ssl.SSLContext):
    """A client TLS context whose roots are loaded on its first TLS connection, not before.

    Its connections are made by :meth:`loaded`: httpx's default context (certifi's roots, or
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), made once. Loading the roots costs 20-40 ms
    of CPU, which a server that talks only to a plain ``http://`` endpoint (a model on this
    machine or on the local network) never needs to pay, nor its first run to wait for.
    """

    _loaded: ssl.SSLContext | None = None

    def __new__(cls) -> LazyTLSContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def loaded(self) -> ssl.SSLContext:
        """The context with its roots, made on first use; safe from any thread."""
        with _tls_lock:
            if self._loaded is None:
                self._loaded = httpx.create_ssl_context()
            return self._loaded

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:  # asyncio's connections
        return self.loaded().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        return self.loaded().wrap_socket(*args, **kwargs)


def tls_context() -> LazyTLSContext:
    """The TLS context every provider connection verifies servers with, made once per process
    (a transport made per client, and per proxy, would load the roots again) and loaded on its
    first TLS connection (:class:`LazyTLSContext`). Safe from any thread."""
    global _tls_context
    with _tls_lock:
        if _tls_context is None:
            _tls_context = LazyTLSContext()
        return _tls_context


def make_client(
    max_connections: int = DEFAULT_MAX_CONNECTIONS, *, keepalive: float = KEEPALIVE_SECONDS
) -> httpx.AsyncClient:
    """A client for the providers: at most ``max_connections`` open at once, idle ones kept for
    ``keepalive`` seconds.

    Made and used on one event loop (its pool is created on the first request); close it with
    ``aclose`` when the process is done with it.
    """
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=keepalive,
    )
    return Client(limits=limits, verify=tls_context())


def lost_connection(exc: httpx.ConnectTimeout) -> httpx.TransportError:
    """What ``httpx-aiohttp`` reports as a ``ConnectTimeout``, as httpx would have said it: a
    timeout stays one; a connection that could not be made is a ``ConnectError``; one reset or
    closed by the server is a ``ReadError``."""
    cause = exc.__cause__
    if cause is None or isinstance(cause, TimeoutError):
        return exc
    # httpx attaches the request on the way out (``request_context``), as for its own transport
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc))
    return httpx.ReadError(str(exc))


class Stream(httpx.AsyncByteStream):
    """A response body, its lost connections reported as :func:`lost_connection` says."""

    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.ConnectTimeout as exc:
            raise lost_connection(exc) from exc.__cause__

    async def aclose(self) -> None:
        await self._inner.aclose()


class DirectResponse:
    """A response to :meth:`Client.post_direct`: what a provider reads of an ``httpx.Response``,
    its status, headers and body, aiohttp's errors raised as httpx's (:func:`lost_connection`).
    Closing it before the body's end closes its connection; read to the end, the connection goes
    back to the pool."""

    __slots__ = ("_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def at_end(self) -> bool:
        """Whether the whole body has arrived (its connection can go back to the pool as is)."""
        return self._response.content.is_eof()

    async def aiter_bytes(self) -> AsyncGenerator[bytes, None]:
        """The body, a chunk per read of the socket (what has arrived, decoded)."""
        content = self._response.content
        try:
            with map_aiohttp_exceptions():
                while chunk := await content.readany():
                    yield chunk
        except httpx.ConnectTimeout as exc:
            raise lost_connection(exc) from exc.__cause__

    async def aread(self) -> bytes:
        try:
            with map_aiohttp_exceptions():
                return await self._response.read()
        except httpx.ConnectTimeout as exc:
            raise lost_connection(exc) from exc.__cause__

    async def aclose(self) -> None:
        with map_aiohttp_exceptions():
            await self._response.__aexit__(None, None, None)


class Transport(AiohttpTransport):
    """``httpx-aiohttp``'s transport, its errors put right (:func:`lost_connection`)."""

    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session of this transport's pool (made on first use, as a request does)."""
        if not isinstance(self.client, aiohttp.ClientSession):
            self.client = self.get_client()
        return self.client

    def proxy_options(self) -> dict[str, Any]:
        """The proxy arguments of an aiohttp request, as ``handle_async_request`` gives them."""
        proxy = self.proxy
        if proxy is None:
            return {}
        auth = aiohttp.BasicAuth(proxy.auth[0], proxy.auth[1]) if proxy.auth else None
        return {"proxy": str(proxy.url), "proxy_auth": auth, "proxy_headers": proxy.headers}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx.ConnectTimeout as exc:
            raise lost_connection(exc) from exc.__cause__
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = Stream(response.stream)
        return response


class ResponseCookies(httpx.Cookies):
    """httpx's cookies, which look at a response only when it sets a cookie.

    httpx hands every response to the standard library's cookie jar, through two urllib
    stand-ins built per response (about a fifth of what opening a streamed request costs here);
    a response without ``Set-Cookie`` (or the obsolete ``Set-Cookie2``) gives the jar nothing.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        headers = response.headers
        if "set-cookie" in headers or "set-cookie2" in headers:
            super().extract_cookies(response)


class Client(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` whose requests, proxied ones included, go through
    :class:`Transport`, and whose cookies are :class:`ResponseCookies`."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.cookies = self._cookies

    @property
    def cookies(self) -> httpx.Cookies:
        return self._cookies

    @cookies.setter
    def cookies(self, cookies: httpx._types.CookieTypes) -> None:
        self._cookies = ResponseCookies(cookies)

    async def post_direct(
        self, url: httpx.URL, body: bytes, headers: Mapping[str, str], limits: aiohttp.ClientTimeout
    ) -> DirectResponse | None:
        """``body`` POSTed to ``url`` straight through aiohttp, streamed, when that sends what
        ``send(build_request(...))`` would; ``None`` when httpx's path is needed (the client has
        cookies to send, auth or event hooks, the URL goes through a transport not of ours, or
        ``headers`` accept a content coding aiohttp may not decode). ``headers`` are the
        client's merged with the request's (aiohttp adds ``Host`` and ``Content-Length``);
        ``limits`` is httpx's timeout as aiohttp's. Raises httpx's exceptions, as
        :class:`Transport` does."""
        if self.is_closed or self._cookies or self.auth is not None or self._hooked():
            return None
        if not DECODED.issuperset(
            coding.strip() for coding in headers.get("accept-encoding", "").split(",") if coding
        ):
            return None
        transport = self._transport_for_url(url)
        if not isinstance(transport, Transport):
            return None
        session = transport.session()
        try:
            with map_aiohttp_exceptions():
                response = await session.request(
                    "POST",
                    str(url),
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    compress=False,
                    timeout=limits,
                    **transport.proxy_options(),
                )
        except httpx.ConnectTimeout as exc:
            raise lost_connection(exc) from exc.__cause__
        if "set-cookie" in response.headers or "set-cookie2" in response.headers:
            answer = httpx.Response(
                response.status,
                headers=response.raw_headers,
                request=httpx.Request("POST", url),
            )
            self._cookies.extract_cookies(answer)
        return DirectResponse(response)

    def _hooked(self) -> bool:
        hooks = self.event_hooks
        return bool(hooks["request"] or hooks["response"])

    def _init_transport(
        self,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> httpx.AsyncBaseTransport:
        if transport is not None:
            return transport
        return Transport(verify=verify, cert=cert, trust_env=trust_env, limits=limits)

    def _init_proxy_transport(
        self,
        proxy: httpx.Proxy,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx.Limits = DEFAULT_LIMITS,
    ) -> httpx.AsyncBaseTransport:
        return Transport(verify=verify, cert=cert, trust_env=trust_env, limits=limits, proxy=proxy)
