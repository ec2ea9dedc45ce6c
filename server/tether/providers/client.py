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
- aiohttp's errors become httpx's: a broken or cut-off answer is an ``httpx.ReadError``, a
  timeout an ``httpx.TimeoutException``, a failed connection an ``httpx.ConnectError`` or a
  ``httpx.TimeoutException`` — all of them retried by :mod:`tether.providers.retry`.
- Closing a response before its end (a cancelled run) closes its connection, so the endpoint
  sees the stream end at once; a response read to its end gives its connection back to the pool.
- Proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``...) are honoured as httpx does.
"""

from __future__ import annotations

import httpx
from httpx_aiohttp import HttpxAiohttpClient

DEFAULT_MAX_CONNECTIONS = 100
KEEPALIVE_SECONDS = 15.0  # idle connections are closed after this long (aiohttp's default)


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
    return HttpxAiohttpClient(limits=limits)
