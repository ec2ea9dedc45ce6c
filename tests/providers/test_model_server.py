"""The loopback model server itself: what the other suites and the e2e tests rely on."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tests.fakes import Call, ModelServer, Reply, Status


def test_the_server_runs_in_a_thread_for_subprocess_tests() -> None:
    with ModelServer.in_thread() as server:
        server.push(Reply(text="from a thread"))
        with httpx.Client(timeout=5) as client:
            answer = client.post(
                f"{server.openai_url}/chat/completions", json={"model": "m", "messages": []}
            )
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == "from a thread"
        assert server.wait_for_requests_sync(1)[0].body["model"] == "m"


async def test_latency_delays_every_answer() -> None:
    async with ModelServer(latency=0.05) as server, httpx.AsyncClient(timeout=5) as client:
        server.push(Reply(text="a"), Reply(text="b"))
        started = time.perf_counter()
        for _ in range(2):
            await client.post(f"{server.url}/v1/messages", json={"model": "m"})
        assert time.perf_counter() - started >= 0.1


async def test_a_request_beyond_the_script_gets_a_400_that_says_so_unless_a_default_is_set() -> (
    None
):
    async with ModelServer() as server, httpx.AsyncClient(timeout=5) as client:
        url = f"{server.openai_url}/chat/completions"
        answer = await client.post(url, json={"model": "m"})
        assert answer.status_code == 400
        assert "no scripted response left" in answer.text
        server.default = Reply(text="always")
        for _ in range(3):
            answer = await client.post(url, json={"model": "m"})
            assert answer.json()["choices"][0]["message"]["content"] == "always"


async def test_requests_are_recorded_and_can_be_awaited() -> None:
    async with ModelServer() as server, httpx.AsyncClient(timeout=5) as client:
        server.push(Status(418, body="teapot"))
        sent = asyncio.create_task(
            client.post(f"{server.url}/v1/messages", json={"a": 1}, headers={"X-Test": "yes"})
        )
        (recorded,) = await server.wait_for_requests(1)
        assert (await sent).status_code == 418
        assert (recorded.method, recorded.path, recorded.format) == (
            "POST",
            "/v1/messages",
            "anthropic",
        )
        assert recorded.headers["x-test"] == "yes"
        assert recorded.body == {"a": 1}


async def test_waiting_for_requests_that_never_come_times_out() -> None:
    async with ModelServer() as server:
        with pytest.raises(TimeoutError):
            await server.wait_for_requests(1, seconds=0.05)


async def test_gemini_requests_are_answered_streamed_or_whole_by_the_method_in_the_path() -> None:
    async with ModelServer() as server, httpx.AsyncClient(timeout=5) as client:
        reply = Reply(text="two words", tool_calls=[Call("read_file", {"path": "a"})])
        server.push(reply, reply, Status(429))
        base = f"{server.gemini_url}/v1beta/models/gemini-x"
        streamed = await client.post(f"{base}:streamGenerateContent?alt=sse", json={})
        assert streamed.headers["content-type"] == "text/event-stream"
        chunks = [
            json.loads(line.removeprefix("data: "))
            for line in streamed.text.splitlines()
            if line.startswith("data: ")
        ]
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        assert parts == [
            {"text": "two "},
            {"text": "words"},
            {"functionCall": {"name": "read_file", "args": {"path": "a"}}},
        ]
        assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
        assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 12
        whole = (await client.post(f"{base}:generateContent", json={})).json()
        assert whole["candidates"][0]["content"]["parts"][0] == {"text": "two words"}
        assert whole["modelVersion"] == "gemini-x"
        refused = await client.post(f"{base}:generateContent", json={})
        assert refused.status_code == 429
        assert refused.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert [r.format for r in server.requests] == ["gemini"] * 3
