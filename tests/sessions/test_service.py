"""The session service: workspace defaults and canonical workspace URIs over a store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tether.protocol import (
    AppendParams,
    ClearSessionParams,
    ConfigureSessionParams,
    CreateSessionParams,
    DeleteResult,
    DeleteSessionParams,
    ErrorCode,
    GetSessionParams,
    ListSessionsParams,
    MessageInput,
    MessagesParams,
    Session,
    SessionNotFound,
    WorkspaceError,
)
from tether.protocol.sessions import ForkSessionParams
from tether.sessions import MemoryStore, SessionService
from tether.sessions.service import SessionHooks


@pytest.fixture
def service(store: MemoryStore) -> SessionService:
    return SessionService(store)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "my project"
    folder.mkdir()
    return folder


def uri_of(path: Path) -> str:
    return path.resolve().as_uri()


async def test_create_without_a_workspace_uses_the_default_workspace(
    service: SessionService, workspace: Path
) -> None:
    service.set_default_workspace(str(workspace))
    session = await service.create(CreateSessionParams(title="t"))
    assert session.workspace == uri_of(workspace)
    assert session.title == "t"


async def test_a_default_workspace_given_as_a_uri_is_used_as_well(
    service: SessionService, workspace: Path
) -> None:
    service.set_default_workspace(workspace.as_uri())
    assert (await service.create(CreateSessionParams())).workspace == uri_of(workspace)


async def test_an_explicit_workspace_wins_over_the_default(
    service: SessionService, workspace: Path, tmp_path: Path
) -> None:
    service.set_default_workspace(str(tmp_path))
    session = await service.create(CreateSessionParams(workspace=str(workspace)))
    assert session.workspace == uri_of(workspace)


@pytest.mark.parametrize(
    "spelling",
    [
        lambda p: str(p),
        lambda p: str(p) + "/",
        lambda p: p.as_uri(),
        lambda p: p.as_uri() + "/",
        lambda p: str(p / "sub" / ".."),
    ],
    ids=["path", "path-with-slash", "file-uri", "file-uri-with-slash", "path-with-dotdot"],
)
async def test_a_workspace_given_as_path_or_file_uri_gives_the_same_canonical_uri(
    service: SessionService, workspace: Path, spelling
) -> None:
    (workspace / "sub").mkdir()
    session = await service.create(CreateSessionParams(workspace=spelling(workspace)))
    assert session.workspace == uri_of(workspace)
    assert session.workspace.startswith("file:///")
    assert "%20" in session.workspace


@pytest.mark.parametrize("workspace", ["relative/dir", ".", "file:relative"])
async def test_a_relative_workspace_path_raises_workspace_error(
    service: SessionService, workspace: str
) -> None:
    with pytest.raises(WorkspaceError) as caught:
        await service.create(CreateSessionParams(workspace=workspace))
    assert caught.value.code == ErrorCode.WORKSPACE_ERROR


async def test_a_workspace_that_does_not_exist_raises_workspace_error(
    service: SessionService, tmp_path: Path
) -> None:
    missing = tmp_path / "missing"
    for spelling in (str(missing), missing.as_uri()):
        with pytest.raises(WorkspaceError) as caught:
            await service.create(CreateSessionParams(workspace=spelling))
        assert caught.value.code == ErrorCode.WORKSPACE_ERROR


@pytest.mark.parametrize(
    "workspace",
    ["~no-such-user-here/project", "/tmp/nul\x00byte", "file:///tmp/nul%00byte", "/" + "x" * 300],
    ids=["unknown-user-home", "nul-in-path", "nul-in-uri", "name-too-long"],
)
async def test_an_unresolvable_workspace_raises_workspace_error(
    service: SessionService, workspace: str
) -> None:
    with pytest.raises(WorkspaceError):
        await service.create(CreateSessionParams(workspace=workspace))


async def test_a_workspace_that_is_a_file_raises_workspace_error(
    service: SessionService, tmp_path: Path
) -> None:
    file = tmp_path / "file.txt"
    file.write_text("not a directory")
    with pytest.raises(WorkspaceError):
        await service.create(CreateSessionParams(workspace=str(file)))


async def test_a_default_workspace_that_does_not_exist_raises_workspace_error_on_create(
    service: SessionService, tmp_path: Path
) -> None:
    service.set_default_workspace(str(tmp_path / "missing"))
    with pytest.raises(WorkspaceError):
        await service.create(CreateSessionParams())


async def test_create_without_any_workspace_raises_workspace_error(
    service: SessionService, store: MemoryStore
) -> None:
    with pytest.raises(WorkspaceError) as caught:
        await service.create(CreateSessionParams())
    assert caught.value.code == ErrorCode.WORKSPACE_ERROR
    assert (await store.list_sessions(workspace=None, cursor=None, limit=10)).sessions == []


async def test_clearing_the_default_workspace_makes_create_require_one_again(
    service: SessionService, workspace: Path
) -> None:
    service.set_default_workspace(str(workspace))
    service.set_default_workspace(None)
    with pytest.raises(WorkspaceError):
        await service.create(CreateSessionParams())


async def test_a_remote_workspace_uri_is_kept_verbatim_without_a_trailing_slash(
    service: SessionService,
) -> None:
    remote = "vscode-remote://ssh-remote+box/home/me/project"
    session = await service.create(CreateSessionParams(workspace=remote + "/"))
    assert session.workspace == remote


async def test_sessions_created_with_a_uri_are_listed_by_the_workspace_path(
    service: SessionService, workspace: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    mine = [await service.create(CreateSessionParams(workspace=workspace.as_uri())) for _ in "ab"]
    await service.create(CreateSessionParams(workspace=other.as_uri()))

    for spelling in (str(workspace), str(workspace) + "/", workspace.as_uri()):
        listed = await service.list_sessions(ListSessionsParams(workspace=spelling))
        assert [s.session_id for s in listed.sessions] == [s.session_id for s in reversed(mine)]
    everything = await service.list_sessions(ListSessionsParams())
    assert len(everything.sessions) == 3


async def test_listing_by_a_relative_workspace_path_raises_workspace_error(
    service: SessionService,
) -> None:
    with pytest.raises(WorkspaceError):
        await service.list_sessions(ListSessionsParams(workspace="relative/dir"))


async def test_the_service_passes_session_methods_through_to_the_store(
    service: SessionService, workspace: Path
) -> None:
    service.set_default_workspace(str(workspace))
    sid = (await service.create(CreateSessionParams())).session_id
    appended = await service.append(
        AppendParams(session_id=sid, messages=[MessageInput(role="user", content="hi")])
    )
    assert [m.content for m in appended.messages] == ["hi"]
    page = await service.messages(MessagesParams(session_id=sid, order="desc"))
    assert page.messages == appended.messages
    configured = await service.configure(ConfigureSessionParams(session_id=sid, title="t"))
    assert configured.title == "t"
    assert (await service.get(GetSessionParams(session_id=sid))).message_count == 1
    assert (await service.clear(ClearSessionParams(session_id=sid))).message_count == 0
    assert await service.delete(DeleteSessionParams(session_id=sid)) == DeleteResult()
    with pytest.raises(SessionNotFound):
        await service.get(GetSessionParams(session_id=sid))


async def test_hooks_hear_of_each_created_and_deleted_session(
    store: MemoryStore, workspace: Path
) -> None:
    created: list[tuple[str, CreateSessionParams]] = []
    deleted: list[str] = []

    async def on_delete(session_id: str) -> None:
        deleted.append(session_id)

    service = SessionService(
        store,
        SessionHooks(
            created=lambda session, params: created.append((session.session_id, params)),
            deleted=on_delete,
        ),
    )
    params = CreateSessionParams(
        workspace=str(workspace),
        mcp_servers=[{"name": "s", "command": "x", "env": {"TOKEN": "s3cret"}}],
    )
    session = await service.create(params)
    assert created == [(session.session_id, params)]
    assert "s3cret" not in session.model_dump_json()  # the server specs stay out of the session

    await service.delete(DeleteSessionParams(session_id=session.session_id))
    assert deleted == [session.session_id]


async def test_hooks_hear_of_forks_and_of_sessions_that_expire(
    store: MemoryStore, workspace: Path
) -> None:
    forked: list[Session] = []
    deleted: list[str] = []

    async def on_delete(session_id: str) -> None:
        deleted.append(session_id)

    service = SessionService(store, SessionHooks(forked=forked.append, deleted=on_delete))
    parent = await service.create(CreateSessionParams(workspace=str(workspace)))
    child = await service.fork(ForkSessionParams(session_id=parent.session_id))
    assert [(s.session_id, s.parent_session_id) for s in forked] == [
        (child.session_id, parent.session_id)
    ]

    later = child.updated_at + timedelta(days=2)
    expired = await service.sweep(timedelta(days=1), later)
    assert sorted(expired) == sorted(deleted) == sorted([parent.session_id, child.session_id])
