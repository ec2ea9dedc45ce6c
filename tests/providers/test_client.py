"""The providers' shared HTTP client against the real loopback endpoint: connections are reused,
bounded, and let go of when a stream is given up.

The endpoint counts the connections it accepts and those that have ended, so these tests see
what the client does on the wire rather than what its pool says of itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.fakes import Hang, ModelServer, Reply, Reset, Status
from tests.providers.streams import cancel_after_first_piece
from tether.protocol import Message, ProviderError, Role
from tether.providers import Completion, ModelRequest, RetryPolicy, TextDelta
from tether.providers.client import Client, LazyTLSContext, lost_connection, make_client
from tether.providers.openai import OpenAIProvider


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer(default=Reply(text="pong from the endpoint")) as server:
        yield server


def provider_over(client: httpx.AsyncClient, server: ModelServer) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=server.openai_url,
        api_key="sk-test",
        client=client,
        timeout=10.0,
        retry=RetryPolicy(max_retries=0),
    )


def ask() -> ModelRequest:
    message = Message(id="m1", role=Role.USER, content="ping", created_at=datetime.now(UTC))
    return ModelRequest(model="test-model", messages=[message])


async def answer(provider: OpenAIProvider) -> str:
    """The text of one whole streamed turn."""
    pieces: list[str] = []
    async with aclosing(provider.stream(ask())) as stream:
        async for event in stream:
            if isinstance(event, TextDelta):
                pieces.append(event.text)
            else:
                assert isinstance(event, Completion)
    return "".join(pieces)


async def test_two_hundred_sequential_model_calls_share_one_connection(
    server: ModelServer,
) -> None:
    async with make_client() as client:
        provider = provider_over(client, server)
        for _ in range(200):
            assert await answer(provider) == "pong from the endpoint"
    assert len(server.requests) == 200
    assert server.connections == 1


async def test_a_hundred_concurrent_streams_all_complete_and_their_connections_are_reused(
    server: ModelServer,
) -> None:
    async with make_client() as client:
        provider = provider_over(client, server)
        first = await asyncio.gather(*(answer(provider) for _ in range(100)))
        opened = server.connections
        second = await asyncio.gather(*(answer(provider) for _ in range(100)))
    assert first == second == ["pong from the endpoint"] * 100
    assert len(server.requests) == 200
    assert 1 <= opened <= 100
    assert server.connections == opened  # the second hundred opened nothing new


async def test_a_turn_whose_body_ends_a_moment_after_its_last_event_keeps_its_connection(
    server: ModelServer,
) -> None:
    server.push(*[Reply(text=f"turn {n}", end_after=0.05) for n in range(3)])
    async with make_client() as client:
        provider = provider_over(client, server)
        assert [await answer(provider) for _ in range(3)] == ["turn 0", "turn 1", "turn 2"]
    assert server.connections == 1


async def test_a_turn_whose_stream_stays_open_after_its_end_is_complete_all_the_same(
    server: ModelServer,
) -> None:
    server.push(Reply(text="done but lingering", linger=True), Reply(text="next"))
    async with make_client() as client:
        provider = provider_over(client, server)
        assert await answer(provider) == "done but lingering"
        await server.wait_for_closed(1)  # given up, not put back in the pool
        assert await answer(provider) == "next"
    assert server.connections == 2


async def test_a_cookie_the_endpoint_sets_goes_back_with_the_next_calls(
    server: ModelServer,
) -> None:
    """httpx's cookie handling is kept (the client skips the jar only for responses that set
    no cookie)."""
    whole = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    server.push(
        Reply(text="no cookie yet"),
        Status(200, body=json.dumps(whole), headers={"Set-Cookie": "affinity=node-7; Path=/"}),
        Reply(text="one"),
        Reply(text="two"),
    )
    async with make_client() as client:
        provider = provider_over(client, server)
        assert [await answer(provider) for _ in range(4)] == ["no cookie yet", "hi", "one", "two"]
        assert dict(client.cookies) == {"affinity": "node-7"}
    cookies = [request.headers.get("cookie") for request in server.requests]
    assert cookies == [None, None, "affinity=node-7", "affinity=node-7"]


async def test_a_request_carries_the_headers_and_body_build_request_would_give_it(
    server: ModelServer,
) -> None:
    """The provider merges the client's headers with its own once, not per request: what the
    endpoint gets is still what ``client.build_request`` makes, for every call."""
    server.push(Reply(text="one"), Reply(text="two"))
    async with make_client() as client:
        provider = provider_over(client, server)
        assert [await answer(provider) for _ in range(2)] == ["one", "two"]
        first, second = server.requests
        expected = client.build_request(
            "POST",
            provider.url,
            content=json.dumps(first.body).encode(),
            headers={
                "content-type": "application/json",
                "accept": "text/event-stream",
                "authorization": "Bearer sk-test",
            },
            timeout=10.0,
        )
    wanted = {name.lower(): value for name, value in expected.headers.items()}
    del wanted["content-length"]  # the JSON above is spaced differently
    for request in (first, second):
        got = dict(request.headers)
        assert got.pop("content-length").isdigit()
        assert got == wanted
    assert second.body == first.body


async def test_max_connections_bounds_the_connections_open_at_once(server: ModelServer) -> None:
    server.latency = 0.02  # so that the streams overlap
    async with make_client(max_connections=4) as client:
        provider = provider_over(client, server)
        answers = await asyncio.gather(*(answer(provider) for _ in range(40)))
    assert answers == ["pong from the endpoint"] * 40
    assert server.connections == 4


async def test_cancelling_a_run_mid_stream_closes_its_connection_and_the_next_call_works(
    server: ModelServer,
) -> None:
    server.push(Hang(after_text="a long answer that stalls"))
    async with make_client() as client:
        provider = provider_over(client, server)
        await cancel_after_first_piece(provider, ask())
        await server.wait_for_closed(1)  # the endpoint saw the stream end, not the client exit
        assert await answer(provider) == "pong from the endpoint"
    assert server.connections == 2  # a cut stream's connection is not put back in the pool


async def test_a_stream_given_up_early_closes_its_connection(server: ModelServer) -> None:
    server.push(Hang(after_text="more is coming"))
    async with make_client() as client:
        provider = provider_over(client, server)
        async with aclosing(provider.stream(ask())) as stream:
            async for event in stream:
                assert isinstance(event, TextDelta)
                break
        await server.wait_for_closed(1)
        assert server.closed == 1


async def test_closing_the_client_closes_its_idle_connections(server: ModelServer) -> None:
    client = make_client()
    provider = provider_over(client, server)
    await answer(provider)
    assert server.closed == 0  # kept alive for the next call
    await client.aclose()
    await server.wait_for_closed(1)


def test_preloading_loads_the_configured_provider_on_a_thread_of_its_own() -> None:
    code = (
        "import sys, threading\n"
        "from tether.backend import preload_provider\n"
        "assert 'aiohttp' not in sys.modules\n"
        "preload_provider('openai')\n"
        "[t.join(30) for t in threading.enumerate() if t.name == 'tether-preload-provider']\n"
        "import tether.providers.client as client\n"
        "print('tether.providers.openai' in sys.modules, 'aiohttp' in sys.modules,\n"
        "      client._tls_context._loaded is not None,\n"
        "      'tether.providers.anthropic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "True", "True", "False"]


def test_preloading_for_a_plain_http_endpoint_loads_no_tls_roots() -> None:
    code = (
        "import sys, threading\n"
        "from tether.backend import preload_provider\n"
        "preload_provider('openai', 'http://127.0.0.1:8080/v1')\n"
        "[t.join(30) for t in threading.enumerate() if t.name == 'tether-preload-provider']\n"
        "import tether.providers.client as client\n"
        "print('tether.providers.openai' in sys.modules,\n"
        "      getattr(client._tls_context, '_loaded', None) is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "False"]


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, signed by nobody the usual roots know."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@contextlib.asynccontextmanager
async def https_hello(cert: Path, key: Path) -> AsyncIterator[str]:
    """An HTTPS server on loopback that answers every request with ``hello``; its URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()


async def test_the_tls_roots_load_on_the_first_tls_connection_and_verify_it(
    self_signed: tuple[Path, Path], server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the roots httpx's context trusts
    context = LazyTLSContext()
    async with Client(verify=context) as client, https_hello(cert, key) as url:
        assert await answer(provider_over(client, server)) == "pong from the endpoint"
        assert context._loaded is None  # plain http: no roots loaded
        response = await client.get(url)
        assert response.text == "hello"
        assert context._loaded is not None


async def test_a_tls_server_the_roots_do_not_vouch_for_is_refused(
    self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # certifi's roots
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with Client(verify=LazyTLSContext()) as client, https_hello(*self_signed) as url:
        with pytest.raises(httpx.ConnectError) as refused:
            await client.get(url)
    assert isinstance(refused.value.__cause__, aiohttp.ClientConnectorCertificateError)


def test_the_scripted_provider_preloads_nothing() -> None:
    code = (
        "import sys, threading\n"
        "from tether.backend import preload_provider\n"
        "preload_provider('scripted')\n"
        "print([t.name for t in threading.enumerate() if t.name == 'tether-preload-provider'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["[]"]


def test_the_providers_do_not_import_httpx_command_line_client() -> None:
    code = (
        "import sys\n"
        "import tether.providers.client\n"
        "print(sys.modules.get('httpx._main'), 'rich' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["None", "False"]


def test_every_client_shares_one_tls_context() -> None:
    first, second = make_client(), make_client(5)
    assert first._transport.ssl_context is second._transport.ssl_context  # type: ignore[attr-defined]
    assert first._transport.ssl_context.verify_mode == ssl.CERT_REQUIRED  # type: ignore[attr-defined]


async def failure_of(provider: OpenAIProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await answer(provider)
    return caught.value


async def test_a_connection_reset_is_reported_as_a_failed_connection_not_a_timeout(
    server: ModelServer,
) -> None:
    server.push(Reset())
    async with make_client() as client:
        error = await failure_of(provider_over(client, server))
    assert "the connection failed (ReadError" in error.message


async def test_a_refused_connection_is_reported_as_one() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with make_client() as client:
        provider = OpenAIProvider(
            base_url=f"http://127.0.0.1:{port}/v1", client=client, retry=RetryPolicy(max_retries=0)
        )
        error = await failure_of(provider)
    assert "the connection failed (ConnectError" in error.message


@pytest.mark.parametrize(
    ("cause", "kind"),
    [
        (aiohttp.ServerDisconnectedError(), httpx.ReadError),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), httpx.ReadError),
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), httpx.ConnectTimeout),
        (None, httpx.ConnectTimeout),
    ],
)
def test_what_httpx_aiohttp_calls_a_connect_timeout_is_named_as_httpx_would(
    cause: BaseException | None, kind: type[httpx.HTTPError]
) -> None:
    reported = httpx.ConnectTimeout("as httpx-aiohttp reports it")
    reported.__cause__ = cause
    assert type(lost_connection(reported)) is kind


async def test_a_proxy_from_the_environment_carries_the_streamed_calls(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's POST goes to aiohttp straight, through the proxy httpx picks for the URL:
    here the endpoint is the proxy, and the model's own host does not resolve."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server.url)
    async with make_client() as client:
        provider = OpenAIProvider(
            base_url="http://model.invalid/v1",
            api_key="sk-test",
            client=client,
            timeout=10.0,
            retry=RetryPolicy(max_retries=0),
        )
        assert await answer(provider) == "pong from the endpoint"
    (request,) = server.requests
    assert request.path == "http://model.invalid/v1/chat/completions"  # as a proxy is asked
    assert request.headers["authorization"] == "Bearer sk-test"


async def test_a_client_with_event_hooks_sends_through_httpx_so_that_they_run(
    server: ModelServer,
) -> None:
    """The direct POST is only taken where httpx's layer would change nothing."""
    seen: list[str] = []

    async def hook(request: httpx.Request) -> None:
        seen.append(request.url.path)

    async with make_client() as client:
        client.event_hooks = {"request": [hook], "response": []}
        provider = provider_over(client, server)
        assert await answer(provider) == "pong from the endpoint"
    assert seen == ["/v1/chat/completions"]


async def test_a_gzipped_stream_is_read_as_httpx_would_decode_it() -> None:
    """The direct POST asks for the codings httpx asks for, and aiohttp decodes them."""
    from aiohttp import web

    events = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hello, gzipped"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    asked: list[str] = []

    async def answer_gzipped(request: web.Request) -> web.Response:
        asked.append(request.headers.get("accept-encoding", ""))
        return web.Response(
            body=gzip.compress(events),
            headers={"content-type": "text/event-stream", "content-encoding": "gzip"},
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer_gzipped)
    runner = web.AppRunner(app)
    await runner.setup()
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    await web.SockSite(runner, listening).start()
    try:
        async with make_client() as client:
            wanted = client.headers["accept-encoding"]
            provider = OpenAIProvider(
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key="sk-test",
                client=client,
                retry=RetryPolicy(max_retries=0),
            )
            assert await answer(provider) == "hello, gzipped"
    finally:
        await runner.cleanup()
    assert asked == [wanted]
