"""Every session method through the real server, driven by pytest-lsp's client."""

from __future__ import annotations

from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from tether.protocol import ErrorCode

from .conftest import call


async def test_create_uses_the_initialize_workspace_and_get_returns_it(
    lsp_client: LanguageClient, workspace: Path
):
    created = await call(
        lsp_client,
        "session/create",
        {
            "title": "t",
            "agentId": "a",
            "model": "m",
            "systemPrompt": "be brief",
            "settings": {"thinkingLevel": "low"},
            "metadata": {"k": 1},
            "tools": ["read_file"],
        },
    )
    assert created["workspace"] == workspace.as_uri()
    assert created["sessionId"][14] == "7"  # UUIDv7
    assert created["messageCount"] == 0 and created["running"] is False
    assert await call(lsp_client, "session/get", {"sessionId": created["sessionId"]}) == created


async def test_append_fills_ids_and_timestamps_and_messages_pages_through_them(
    lsp_client: LanguageClient,
):
    sid = (await call(lsp_client, "session/create", {}))["sessionId"]
    appended = await call(
        lsp_client,
        "session/append",
        {
            "sessionId": sid,
            "messages": [
                {"role": "user", "content": "hi", "author": "ana"},
                {
                    "role": "model",
                    "toolCalls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "function", "toolCallId": "c1", "content": "ok"},
            ],
        },
    )
    messages = appended["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["toolCalls"] == [{"id": "c1", "name": "f", "arguments": "{}"}]
    assert set(messages[0]) == {"id", "role", "content", "author", "createdAt"}

    first = await call(lsp_client, "session/messages", {"sessionId": sid, "limit": 2})
    assert first["total"] == 3 and len(first["messages"]) == 2
    rest = await call(
        lsp_client, "session/messages", {"sessionId": sid, "cursor": first["nextCursor"]}
    )
    assert "nextCursor" not in rest
    assert [m["id"] for m in first["messages"] + rest["messages"]] == [m["id"] for m in messages]
    newest = await call(lsp_client, "session/messages", {"sessionId": sid, "order": "desc"})
    assert [m["id"] for m in newest["messages"]] == [m["id"] for m in reversed(messages)]


async def test_list_pages_newest_first_and_filters_by_workspace(
    lsp_client: LanguageClient, tmp_path: Path
):
    other = tmp_path / "other"
    other.mkdir()
    ids = [
        (await call(lsp_client, "session/create", {"workspace": str(other)}))["sessionId"]
        for _ in range(3)
    ]
    page = await call(lsp_client, "session/list", {"workspace": other.as_uri(), "limit": 2})
    assert [s["sessionId"] for s in page["sessions"]] == ids[:0:-1]
    last = await call(
        lsp_client, "session/list", {"workspace": str(other), "cursor": page["nextCursor"]}
    )
    assert [s["sessionId"] for s in last["sessions"]] == ids[:1]
    assert "nextCursor" not in last


async def test_configure_changes_only_the_given_fields(lsp_client: LanguageClient):
    created = await call(lsp_client, "session/create", {"title": "a", "model": "m1"})
    changed = await call(
        lsp_client, "session/configure", {"sessionId": created["sessionId"], "model": "m2"}
    )
    assert changed["title"] == "a" and changed["model"] == "m2"
    assert changed["updatedAt"] >= created["updatedAt"]


async def test_a_fork_may_narrow_the_allow_lists_never_widen_them(lsp_client: LanguageClient):
    parent = await call(
        lsp_client, "session/create", {"tools": ["read_file"], "allowedModels": ["m1"]}
    )
    sid = parent["sessionId"]
    narrower = await call(lsp_client, "session/fork", {"sessionId": sid, "allowedModels": []})
    assert (narrower["tools"], narrower["allowedModels"]) == (["read_file"], [])
    with pytest.raises(JsonRpcException) as raised:
        await call(
            lsp_client,
            "session/fork",
            {"sessionId": sid, "tools": ["read_file", "run_command"], "allowedModels": None},
        )
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    data = raised.value.data
    assert data["widened"] == {"tools": ["run_command"], "allowedModels": None}
    assert [field["type"] for field in data["fields"]] == ["widens", "widens"]
    # the client's own configure is the user's act: it may widen
    widened = await call(lsp_client, "session/configure", {"sessionId": sid, "tools": None})
    assert "tools" not in widened  # no limit


async def test_clear_empties_the_history_and_delete_forgets_the_session(
    lsp_client: LanguageClient,
):
    sid = (await call(lsp_client, "session/create", {"title": "keep"}))["sessionId"]
    await call(
        lsp_client,
        "session/append",
        {"sessionId": sid, "messages": [{"role": "user", "content": "x"}]},
    )
    cleared = await call(lsp_client, "session/clear", {"sessionId": sid})
    assert cleared["messageCount"] == 0 and cleared["title"] == "keep"
    assert (await call(lsp_client, "session/messages", {"sessionId": sid}))["total"] == 0
    assert await call(lsp_client, "session/delete", {"sessionId": sid}) == {"deleted": True}
    with pytest.raises(JsonRpcException) as raised:
        await call(lsp_client, "session/get", {"sessionId": sid})
    assert raised.value.code == ErrorCode.SESSION_NOT_FOUND
    assert raised.value.data == {"sessionId": sid}


@pytest.mark.parametrize(
    "method",
    [
        "session/get",
        "session/messages",
        "session/append",
        "session/configure",
        "session/clear",
        "session/delete",
    ],
)
async def test_an_unknown_session_id_is_session_not_found_with_its_id(
    lsp_client: LanguageClient, method: str
):
    params = {"sessionId": "nope", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(JsonRpcException) as raised:
        await call(lsp_client, method, params)
    assert raised.value.code == ErrorCode.SESSION_NOT_FOUND
    assert raised.value.data == {"sessionId": "nope"}


async def test_a_workspace_that_does_not_exist_is_a_workspace_error(lsp_client: LanguageClient):
    with pytest.raises(JsonRpcException) as raised:
        await call(lsp_client, "session/create", {"workspace": "/no/such/dir/anywhere"})
    assert raised.value.code == ErrorCode.WORKSPACE_ERROR


async def test_bad_params_are_invalid_params_listing_the_fields(lsp_client: LanguageClient):
    with pytest.raises(JsonRpcException) as raised:
        await call(lsp_client, "session/messages", {"sessionId": "x", "limit": 0, "order": "up"})
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    assert {f["field"] for f in raised.value.data["fields"]} == {"limit", "order"}


async def test_a_tool_result_for_an_unknown_call_is_refused_and_nothing_is_appended(
    lsp_client: LanguageClient,
):
    sid = (await call(lsp_client, "session/create", {}))["sessionId"]
    with pytest.raises(JsonRpcException) as raised:
        await call(
            lsp_client,
            "session/append",
            {
                "sessionId": sid,
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "toolCallId": "ghost", "content": "?"},
                ],
            },
        )
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    assert (await call(lsp_client, "session/get", {"sessionId": sid}))["messageCount"] == 0


async def test_an_unknown_method_is_method_not_found(lsp_client: LanguageClient):
    with pytest.raises(JsonRpcException) as raised:
        await call(lsp_client, "session/teleport", {})
    assert raised.value.code == ErrorCode.METHOD_NOT_FOUND
