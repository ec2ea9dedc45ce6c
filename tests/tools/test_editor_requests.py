"""Requests to the editor that a tool's thread waits for: bounded, and ended at once by an
interrupt (what a cancelled call's ``finish_once_started`` calls)."""

from __future__ import annotations

import asyncio

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

    async def request(self) -> str:
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
    assert await asyncio.to_thread(requests.call, editor.request, "workspace/applyEdit") == (
        "applied"
    )


async def test_an_unanswered_request_is_withdrawn_after_the_timeout():
    editor = Editor()
    requests = EditorRequests(asyncio.get_running_loop(), 0.2, "acp.request_timeout")
    with pytest.raises(RequestWithdrawn, match=r"within 0.2 s \(acp.request_timeout\)"):
        await asyncio.to_thread(requests.call, editor.request, "fs/write_text_file")
    await asyncio.wait_for(editor.withdrawn.wait(), 10)


async def test_a_cancelled_call_interrupts_the_wait_and_reports_what_it_did():
    editor = Editor()
    requests = EditorRequests(asyncio.get_running_loop(), 600, "lsp.apply_edit_timeout")

    def write() -> str:
        try:
            requests.call(editor.request, "workspace/applyEdit")
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
        await asyncio.to_thread(requests.call, editor.request, "workspace/applyEdit")
