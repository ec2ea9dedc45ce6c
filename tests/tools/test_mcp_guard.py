"""The guard on what an MCP server sends: line splitting under a limit, and the message policy."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from tether.tools.mcp.guard import (
    INVALID_ANSWER,
    PROGRESS_BURST,
    Guard,
    Oversize,
    read_lines,
)


async def lines_of(chunks: list[bytes], limit: int) -> list[bytes | Oversize]:
    send, receive = anyio.create_memory_object_stream[bytes](len(chunks))
    async with send:
        for chunk in chunks:
            send.send_nowait(chunk)
    return [line async for line in read_lines(receive, limit)]  # type: ignore[arg-type]


async def test_lines_are_split_across_chunks_and_an_unfinished_last_line_is_dropped() -> None:
    lines = await lines_of([b"one\ntw", b"o\n\nthr", b"ee\nunfinished"], limit=10)

    assert lines == [b"one", b"two", b"", b"three"]


async def test_a_line_over_the_limit_is_skipped_keeping_its_ends() -> None:
    long = b'{"jsonrpc": "2.0", "id": 7, "result": {"text": "' + b"x" * 50_000 + b'"}}'
    lines = await lines_of([long[:1000], long[1000:30_000], long[30_000:] + b"\nafter\n"], 100)

    assert lines[1] == b"after"
    skipped = lines[0]
    assert isinstance(skipped, Oversize)
    assert skipped.size == len(long)
    assert long.startswith(skipped.head)
    assert long.endswith(skipped.tail)


def answer_of(message: SessionMessage | None) -> Any:
    assert message is not None
    return message.message


def line(**fields: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **fields}).encode()


@pytest.mark.parametrize(
    ("head", "tail"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "result": {"te', b""),
        (b'{"result": {"text": "xx', b'xx"}, "jsonrpc": "2.0", "id": 7}'),
    ],
)
def test_an_answer_over_the_limit_becomes_an_error_for_its_id(head: bytes, tail: bytes) -> None:
    error = answer_of(Guard("s").inbound(Oversize(9 << 20, head, tail)))

    assert isinstance(error, types.JSONRPCError)
    assert (error.id, error.error.code) == (7, INVALID_ANSWER)


def test_an_oversized_message_without_a_readable_id_is_dropped() -> None:
    guard = Guard("s")
    assert guard.inbound(Oversize(9 << 20, b'{"params": {"id": 7', b'"id": 7}}')) is None
    assert guard.invalid == 1


def test_an_invalid_answer_with_an_id_becomes_an_error_for_it() -> None:
    error = answer_of(Guard("s").inbound(line(id="a-1", result=42)))

    assert isinstance(error, types.JSONRPCError)
    assert (error.id, error.error.code) == ("a-1", INVALID_ANSWER)


def test_lines_that_are_not_json_rpc_are_dropped_and_counted() -> None:
    guard = Guard("s")
    for junk in [b"hello", b"[1, 2]", line(result={}), line(id=1, method=7)]:
        assert guard.inbound(junk) is None, junk
    assert guard.invalid == 4
    assert guard.last_invalid is not None and "method" in guard.last_invalid


def test_notifications_tether_does_not_use_are_dropped_before_validation() -> None:
    guard = Guard("s")
    assert guard.inbound(line(method="notifications/message", params={"level": 3})) is None
    assert guard.inbound(line(method="notifications/prompts/list_changed")) is None
    assert guard.invalid == 0
    cancelled = line(method="notifications/cancelled", params={"requestId": 1})
    assert guard.inbound(cancelled) is not None


def test_progress_passes_in_a_burst_then_at_the_rate() -> None:
    now = [0.0]
    guard = Guard("s", clock=lambda: now[0])

    def progress(token: int) -> bool:
        message = line(
            method="notifications/progress", params={"progressToken": token, "progress": 1}
        )
        return guard.inbound(message) is not None

    assert [progress(1) for _ in range(PROGRESS_BURST + 5)].count(True) == PROGRESS_BURST
    assert progress(2)  # another call has its own burst
    now[0] += 1.0
    assert [progress(1) for _ in range(20)].count(True) == 10


def test_tool_list_changes_pass_in_a_burst_then_at_the_rate() -> None:
    now = [0.0]
    guard = Guard("s", clock=lambda: now[0])
    changed = line(method="notifications/tools/list_changed")
    passed = [guard.inbound(changed) is not None for _ in range(PROGRESS_BURST + 5)]
    assert passed.count(True) == PROGRESS_BURST
    now[0] += 1.0
    assert [guard.inbound(changed) is not None for _ in range(20)].count(True) == 10


def test_requests_from_the_server_pass_while_few_wait_for_an_answer() -> None:
    guard = Guard("s", max_server_requests=2)
    requests = [guard.inbound(line(id=f"r{n}", method="ping")) for n in range(3)]
    assert [request is not None for request in requests] == [True, True, False]

    guard.outbound(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id="r0", result={})))
    assert guard.inbound(line(id="r3", method="ping")) is not None
    assert guard.dropped_requests == 1


def test_deeply_nested_json_is_dropped_not_raised() -> None:
    guard = Guard("s")
    nested = b'{"jsonrpc": "2.0", "id": 1, "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

    assert guard.inbound(nested) is None
    assert guard.invalid == 1
