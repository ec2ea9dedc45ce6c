"""The real server's stdio, byte for byte: lifecycle, framing faults, pipelining, a clean stdout."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

import tether
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode
from tether.protocol.framing import Frame, FrameDecoder, encode_frame
from tether.protocol.limits import MAX_REQUEST_DEPTH

from .conftest import SERVER


async def test_initialize_reports_protocol_version_1_and_the_session_store(raw: Connection):
    result = await raw.request("initialize", {"clientInfo": {"name": "test"}})
    assert result["protocolVersion"] == 1
    assert result["serverInfo"] == {"name": "tether", "version": tether.__version__}
    assert result["capabilities"]["sessions"]["store"] == "memory"


async def test_requests_before_initialize_are_refused_with_32002(raw: Connection):
    with pytest.raises(RpcError) as raised:
        await raw.request("session/list", {})
    assert raised.value.code == ErrorCode.SERVER_NOT_INITIALIZED
    assert (await raw.request("initialize", {}))["protocolVersion"] == 1


async def test_shutdown_then_exit_ends_the_process_with_code_0(server: Connection):
    assert await server.request("shutdown") is None
    with pytest.raises(RpcError) as raised:
        await server.request("session/list", {})
    assert raised.value.code == ErrorCode.INVALID_REQUEST
    server.notify("exit")
    assert await asyncio.wait_for(server.process.wait(), 10) == 0


async def test_exit_without_shutdown_ends_the_process_with_code_1(server: Connection):
    server.notify("exit")
    assert await asyncio.wait_for(server.process.wait(), 10) == 1


async def test_the_server_exits_when_its_client_closes_stdin(server: Connection):
    server.process.stdin.close()  # type: ignore[union-attr]
    assert await asyncio.wait_for(server.process.wait(), 10) == 1


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(encode_frame(b"{not json"), id="malformed-json"),
        pytest.param(b"Content-Type: x\r\n\r\n{}", id="missing-content-length"),
        pytest.param(b"Content-Length: x\r\n\r\n", id="non-numeric-length"),
        pytest.param(b"garbage line\r\n\r\n", id="garbage-header"),
        pytest.param(b"Content-Length: 500\r\n\r\n{}", id="length-too-long"),
        pytest.param(
            encode_frame(b'{"jsonrpc":"2.0","id":"x","method":"session/list"')[:-5],
            id="truncated-body",
        ),
        pytest.param(encode_frame(b"\xff\xfe\xfd"), id="invalid-utf8"),
        pytest.param(encode_frame(b"[]"), id="empty-batch"),
        pytest.param(b"Content-Length: 268435457\r\n\r\n{}", id="length-over-the-limit"),
        pytest.param(b"Content-Length: 1099511627776\r\n\r\n{", id="length-of-a-terabyte"),
        pytest.param(b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n", id="length-of-5000-digits"),
        pytest.param(b"Content-Length: {\r\n", id="header-line-running-into-the-next"),
    ],
)
async def test_a_bad_frame_is_answered_and_the_next_request_still_succeeds(
    server: Connection, bad: bytes
):
    server.send_raw(bad)
    assert await server.request("session/list", {}) == {"sessions": []}


async def test_a_length_over_the_limit_is_a_parse_error_naming_it_and_the_stream_goes_on(
    server: Connection,
):
    body = orjson.dumps({"jsonrpc": "2.0", "id": "cut", "method": "session/list", "params": {}})
    server.send_raw(b"Content-Length: 2147483648\r\n\r\n" + body)  # a lie: the body is short
    assert await server.request("session/list", {}) == {"sessions": []}
    errors = [m["error"] for m in server.stray if m.get("id") is None]
    assert errors[0]["code"] == ErrorCode.PARSE_ERROR
    assert errors[0]["data"] == {"limit": "maxFrameBytes", "value": 64 * 1024 * 1024}
    assert [m["result"] for m in server.stray if m.get("id") == "cut"] == [{"sessions": []}]


def nested_request(msg_id: str, method: str, levels: int, *, id_first: bool) -> bytes:
    """A request whose body nests ``levels`` levels (its own object and ``params`` counted)."""
    deep = b"[" * (levels - 2) + b"]" * (levels - 2)
    head = b'"jsonrpc":"2.0","id":%s,"method":"%s"' % (orjson.dumps(msg_id), method.encode())
    params = b'"params":{"x":%s}' % deep
    return b"{%s,%s}" % ((head, params) if id_first else (params, head))


@pytest.mark.parametrize("id_first", [True, False], ids=["id-first", "id-last"])
@pytest.mark.parametrize("levels", [MAX_REQUEST_DEPTH + 1, 100_000])
async def test_a_request_nested_deeper_than_the_decoder_takes_is_answered_with_its_id(
    server: Connection, levels: int, id_first: bool
):
    server.send_raw(encode_frame(nested_request("deep", "session/list", levels, id_first=id_first)))
    assert await server.request("session/list", {}) == {"sessions": []}  # answered in order
    [answer] = [m for m in server.stray if m.get("id") == "deep"]
    assert answer["error"]["code"] == ErrorCode.INVALID_REQUEST
    assert answer["error"]["data"] == {"limit": "maxRequestDepth", "value": MAX_REQUEST_DEPTH}


async def test_a_request_nested_as_deep_as_the_decoder_takes_is_decoded(server: Connection):
    body = nested_request("deep", "session/list", MAX_REQUEST_DEPTH, id_first=False)
    server.send_raw(encode_frame(body))
    assert await server.request("session/list", {}) == {"sessions": []}
    assert [m for m in server.stray if m.get("id") == "deep"] == [
        {"jsonrpc": "2.0", "id": "deep", "result": {"sessions": []}}
    ]


async def test_header_names_are_case_insensitive_and_content_type_is_ignored(server: Connection):
    body = orjson.dumps({"jsonrpc": "2.0", "id": "lc", "method": "session/list", "params": {}})
    server.send_raw(
        b"content-type: application/vscode-jsonrpc; charset=utf-8\r\n"
        b"CONTENT-LENGTH: %d\r\n\r\n%s" % (len(body), body)
    )
    assert await server.request("session/list", {}) == {"sessions": []}
    assert not [m for m in server.stray if m.get("id") == "lc" and "error" in m]


async def test_content_length_counts_bytes_of_a_multibyte_body(server: Connection):
    session = await server.request("session/create", {"title": "naïve ☃ 日本"})
    assert session["title"] == "naïve ☃ 日本"
    text = "é" * 5000 + "🚀"
    appended = await server.request(
        "session/append",
        {"sessionId": session["sessionId"], "messages": [{"role": "user", "content": text}]},
    )
    assert appended["messages"][0]["content"] == text


async def test_ten_thousand_pipelined_requests_each_get_exactly_one_response(server: Connection):
    session = await server.request("session/create", {})
    params = {"sessionId": session["sessionId"]}
    results = await asyncio.wait_for(
        asyncio.gather(*(server.request("session/get", params) for _ in range(10_000))), 120
    )
    assert len(results) == 10_000
    assert all(r["sessionId"] == session["sessionId"] for r in results)
    assert server.stray == []


async def test_pipelined_appends_from_many_tasks_lose_nothing(server: Connection):
    sid = (await server.request("session/create", {}))["sessionId"]

    async def append(task: int) -> None:
        for n in range(20):
            await server.request(
                "session/append",
                {"sessionId": sid, "messages": [{"role": "user", "content": f"{task}:{n}"}]},
            )

    await asyncio.gather(*(append(t) for t in range(50)))
    page = await server.request("session/messages", {"sessionId": sid, "limit": 1000})
    assert page["total"] == 1000
    by_task: dict[str, list[int]] = {}
    for message in page["messages"]:
        task, n = message["content"].split(":")
        by_task.setdefault(task, []).append(int(n))
    assert all(ns == list(range(20)) for ns in by_task.values()) and len(by_task) == 50


async def test_stdout_carries_protocol_frames_only(workspace: Path):
    """Drive a session with debug logging and bad input; every stdout byte must be a frame."""
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"workspaceFolders": [{"uri": workspace.as_uri()}]},
        },
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/create", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "session/get", "params": {"sessionId": "none"}},
        {"jsonrpc": "2.0", "id": 4, "method": "no/such", "params": {}},
        {"jsonrpc": "2.0", "id": 5, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "exit"},
    ]
    stream = b"".join(encode_frame(orjson.dumps(r)) for r in requests[:3])
    stream += encode_frame(b"{oops") + b"".join(encode_frame(orjson.dumps(r)) for r in requests[3:])
    process = await asyncio.create_subprocess_exec(
        *SERVER[:-1],
        "--log-level",
        "debug",
        "serve",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(stream), 30)
    assert process.returncode == 0
    items = FrameDecoder().feed(stdout)
    assert all(isinstance(item, Frame) for item in items)
    replies = [orjson.loads(item.body) for item in items if isinstance(item, Frame)]
    assert Counter(r.get("id") for r in replies) == Counter([1, 2, 3, 4, None, 5])
    assert b"DEBUG" in stderr


def test_python_m_tether_version_prints_the_version():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "tether", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("tether ")


async def test_tcp_serves_its_first_client_and_turns_a_second_away():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        *SERVER, "--tcp", f"127.0.0.1:{port}", stdin=asyncio.subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    break
                except ConnectionRefusedError:
                    await asyncio.sleep(0.05)  # the server is still starting: poll its port
            second_reader, second_writer = await asyncio.open_connection("127.0.0.1", port)
            assert await second_reader.read() == b""  # closed at once
            second_writer.close()
            request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            writer.write(encode_frame(orjson.dumps(request)))
            decoder, frames = FrameDecoder(), []
            while not frames:
                frames = decoder.feed(await reader.read(65536))
            reply = orjson.loads(frames[0].body)  # type: ignore[union-attr]
            assert reply["result"]["protocolVersion"] == 1
            writer.write(encode_frame(orjson.dumps({"jsonrpc": "2.0", "method": "exit"})))
            assert await process.wait() == 1  # exit without shutdown
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
