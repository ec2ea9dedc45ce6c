"""Requests to the editor that a tool's thread waits for: bounded (on the loop, and in the
thread when the loop stops), and ended at once by an interrupt (what a cancelled call's
``finish_once_started`` calls)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tether.tools.base import ToolError
from tether.tools.editor_requests import EditorRequests, RequestWithdrawn
from tether.tools.writing import finish_once_started


class Editor:
    """A request that is answered only when ``answer`` is set; ``withdrawn`` once cancelled."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()
        self.withdrawn = asyncio.Event()

    async def request(self, method: str, params: Any) -> str:
        self.asked.set()
        try:
            await self.answer.wait()
        except asyncio.CancelledError:
            self.withdrawn.set()
            raise
        return "applied"


async def test_an_answer_comes_back_to_the_thread():
    editor = Editor()
    editor.answer.set()
    requests = EditorRequests(asyncio.get_running_loop(), 10, "lsp.apply_edit_timeout")
    answer = await asyncio.to_thread(requests.call, editor.request, "workspace/applyEdit", {})
    assert answer == "applied"


async def test_an_unanswered_request_is_withdrawn_after_the_timeout():
    editor = Editor()
    requests = EditorRequests(asyncio.get_running_loop(), 0.2, "acp.request_timeout")
    with pytest.raises(RequestWithdrawn, match=r"within 0.2 s \(acp.request_timeout\)"):
        await asyncio.to_thread(requests.call, editor.request, "fs/write_text_file", {})
    await asyncio.wait_for(editor.withdrawn.wait(), 10)


async def test_a_cancelled_call_interrupts_the_wait_and_reports_what_it_did():
    editor = Editor()
    requests = EditorRequests(asyncio.get_running_loop(), 600, "lsp.apply_edit_timeout")

    def write() -> str:
        try:
            requests.call(editor.request, "workspace/applyEdit", {})
        except RequestWithdrawn as exc:
            return f"failed: {exc}"
        return "written"

    call = asyncio.ensure_future(finish_once_started(write, interrupt=requests.interrupt))
    await asyncio.wait_for(editor.asked.wait(), 10)
    call.cancel()
    result = await asyncio.wait_for(call, 10)  # the thread's own result, not a cancellation
    assert result.startswith("failed: the call was cancelled while it waited")
    await asyncio.wait_for(editor.withdrawn.wait(), 10)
    with pytest.raises(ToolError, match="before workspace/applyEdit was sent"):
        await asyncio.to_thread(requests.call, editor.request, "workspace/applyEdit", {})


def test_a_wait_whose_event_loop_stopped_ends_after_its_bound() -> None:
    """The loop stops (without cancelling its tasks) while a tool's thread waits: the thread
    is not held for good (tether would hang at exit), but ends with the request withdrawn."""
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever)
    running.start()
    editor = Editor()
    requests = EditorRequests(loop, 0.2, "acp.request_timeout")
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            requests.call(editor.request, "fs/write_text_file", {})
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=wait)
    try:
        waiting.start()
        asyncio.run_coroutine_threadsafe(editor.asked.wait(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        running.join(10)
        waiting.join(10)
        assert not waiting.is_alive()
        [error] = outcome
        assert isinstance(error, RequestWithdrawn) and "event loop stopped" in str(error)
    finally:
        loop.run_until_complete(_cancel_all(loop))
        loop.close()


async def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
