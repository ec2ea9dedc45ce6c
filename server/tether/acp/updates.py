"""tether's events and messages as ACP ``session/update``\\ s: the progress of a run as it
happens, and a stored history replayed for ``session/load``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

import orjson
from pydantic import ValidationError

from tether.acp.models import (
    CompactionUpdate,
    ContentChunk,
    ContentOut,
    DiffContent,
    ImageOut,
    NoticeUpdate,
    PlanEntryOut,
    PlanUpdate,
    ResourceLinkOut,
    SessionUpdate,
    TerminalContent,
    TextOut,
    ToolCallProgress,
    ToolCallStart,
    ToolContent,
    ToolStatus,
    UsageUpdate,
)
from tether.acp.tool_calls import (
    builtin_kind,
    diff_content,
    proposed_content,
    raw_input,
    starting_call,
    without_diff,
)
from tether.protocol import ImageBlock, Message, ResourceLinkBlock, Role, TextBlock, is_blocks
from tether.protocol.kernel import (
    CheckpointRecorded,
    CompactionFinished,
    CompactionStarted,
    HookRun,
    IterationFinished,
    IterationStarted,
    MessageDelta,
    Notice,
    ProgressParams,
    RunFinished,
    RunStarted,
    RunWarning,
    ThoughtDelta,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.protocol.messages import DIFF_KEY, REASONING_KEY, TOOL_KINDS_KEY, USAGE_KEY
from tether.protocol.plans import Plan, PlanEntry
from tether.protocol.usage import Usage

logger = logging.getLogger(__name__)

Send = Callable[[SessionUpdate], None]
Notify = Callable[[str, dict[str, Any]], None]
NOTICE = "_tether/notice"  # the extension notification of a notice, for other clients
MAX_PROGRESS_LINES = 100  # the last lines a running tool reported, shown as its content
MAX_SUBAGENT_CHARS = 8000  # the end of what a sub-agent did, shown in its task call


def plan_update(entries: Iterable[PlanEntry]) -> PlanUpdate:
    """A plan as ACP's ``plan`` update (ACP requires a priority: ``medium`` when none is set)."""
    return PlanUpdate(
        entries=[
            PlanEntryOut(
                content=entry.content, priority=entry.priority or "medium", status=entry.status
            )
            for entry in entries
        ]
    )


def text_content(text: str) -> list[ToolContent]:
    return [ToolContent(content=TextOut(text=text))]


def tool_call_start(
    call_id: str, name: str, arguments: str, kind: str, workspace: Path | None
) -> ToolCallStart:
    return ToolCallStart(**starting_call(call_id, name, raw_input(arguments), kind, workspace))


@dataclass
class RunUpdates:
    """Turns the ``kernel/progress`` events of one run into updates for ``send``."""

    send: Send
    workspace: Path | None
    kinds: dict[str, str] = field(default_factory=dict)  # tool call id -> tether tool kind
    terminals: dict[str, str] = field(default_factory=dict)  # tool call id -> editor terminal
    written: dict[str, str] = field(default_factory=dict)  # path -> text the editor last wrote
    _progress: dict[str, list[str]] = field(default_factory=dict)  # lines a running tool reported
    compaction: bool = False  # the client advertised session.compaction
    notices: bool = False  # the client advertised session.notices
    notify: Notify | None = None  # sends a notification (an extension's) to the client
    spawned: Callable[[str], None] | None = None  # told each sub-agent's session id
    _compactions: int = 0
    _shown_in: dict[str, str] = field(default_factory=dict)  # sub-agent run -> the call showing it
    _child_text: dict[str, str] = field(default_factory=dict)  # that call -> what it shows

    def __call__(self, progress: ProgressParams) -> None:
        if progress.parent_tool_call_id is not None:
            self._subagent(progress)
            return
        event = progress.event
        match event:
            case MessageDelta(text=text, message_id=message_id):
                self.send(
                    ContentChunk(
                        session_update="agent_message_chunk",
                        content=TextOut(text=text),
                        message_id=message_id,
                    )
                )
            case ThoughtDelta(text=text, message_id=message_id):
                self.send(
                    ContentChunk(
                        session_update="agent_thought_chunk",
                        content=TextOut(text=text),
                        message_id=message_id,
                    )
                )
            case ToolCallStarted():
                self.send(self._start(event))
            case ToolCallUpdate():
                self.send(self._update(event))
            case CompactionStarted() | CompactionFinished():
                self._compaction(progress.run_id, event)
            case RunWarning() | Notice():
                self._notice(progress.session_id, event)
            case Plan(entries=entries):
                self.send(plan_update(entries))
            case RunStarted() | IterationStarted() | IterationFinished():
                pass  # ACP has no update for a run's or a model call's start or end
            case RunFinished():
                pass  # its stop reason answers session/prompt, its usage follows (acp/agent.py)
            case HookRun():
                pass  # ACP has no hook update: a block shows as the call's failure or the
                # refused prompt, a failed or timed-out hook as a notice
            case CheckpointRecorded():
                pass  # ACP has no checkpoint update: `_tether/rewind` restores the files
            case _:
                assert_never(event)

    def _subagent(self, progress: ProgressParams) -> None:
        """A sub-agent's event, shown as text in the content of the ``task`` call that started
        it (its own sub-agents' in that same call): its answer as it streams, a line per tool
        it calls. ACP has no sessions within a session."""
        call = progress.parent_tool_call_id
        if call not in self.kinds:  # a sub-agent's sub-agent: shown where its parent is
            call = self._shown_in.get(progress.parent_run_id or "")
        if call is None:
            return
        if progress.run_id not in self._shown_in:
            self._shown_in[progress.run_id] = call
            if self.spawned is not None:
                self.spawned(progress.session_id)
        event = progress.event
        if isinstance(event, MessageDelta):
            added = event.text
        elif isinstance(event, ToolCallStarted):
            added = f"\n→ {event.title or event.name}\n"
        else:
            return
        text = (self._child_text.get(call, "") + added)[-MAX_SUBAGENT_CHARS:]
        self._child_text[call] = text
        self.send(
            ToolCallProgress(
                tool_call_id=call, status="in_progress", content=text_content(text.strip())
            )
        )

    def _start(self, event: ToolCallStarted) -> ToolCallStart:
        self.kinds[event.tool_call_id] = event.tool_kind
        start = tool_call_start(
            event.tool_call_id, event.name, event.arguments, event.tool_kind, self.workspace
        )
        if event.diff is not None:  # the change it proposes, before it is asked or run
            start.content = [proposed_content(event.diff, self.workspace)]
        return start

    def _notice(self, session_id: str, event: RunWarning | Notice) -> None:
        """A ``notice`` update to a client that takes them; to the others the extension
        notification ``_tether/notice`` (which a client that does not know it ignores) and the
        log. Never an ``agent_message_chunk``: it would read as the model's answer."""
        level = event.level if isinstance(event, Notice) else "warning"
        if self.notices:
            self.send(NoticeUpdate(severity=level, title=event.message or level))
            return
        logger.warning("%s", event.message)
        if self.notify is not None:
            params: dict[str, Any] = {
                "sessionId": session_id,
                "level": level,
                "message": event.message,
            }
            if event.data is not None:
                params["data"] = event.data
            self.notify(NOTICE, params)

    def _compaction(self, run_id: str, event: CompactionStarted | CompactionFinished) -> None:
        """``compaction_update`` to a client that takes it; nothing to the others (a summary
        in the agent's message would read as its answer)."""
        if not self.compaction:
            return
        if isinstance(event, CompactionStarted):
            self._compactions += 1
            update = CompactionUpdate(
                compaction_id=self._compaction_id(run_id), status="in_progress"
            )
        elif event.error is not None:
            update = CompactionUpdate(
                compaction_id=self._compaction_id(run_id), status="failed", error=event.error
            )
        else:
            summary = [TextOut(text=event.summary)] if event.summary else None
            update = CompactionUpdate(
                compaction_id=self._compaction_id(run_id), status="completed", summary=summary
            )
        self.send(update)

    def _compaction_id(self, run_id: str) -> str:
        return f"{run_id}-{self._compactions}"

    def _update(self, event: ToolCallUpdate) -> ToolCallProgress:
        call_id = event.tool_call_id
        if event.status is ToolCallStatus.IN_PROGRESS:
            if event.progress is None:
                return ToolCallProgress(tool_call_id=call_id, status="in_progress")
            lines = self._progress.setdefault(call_id, [])
            lines.append(event.progress)
            del lines[:-MAX_PROGRESS_LINES]
            return ToolCallProgress(
                tool_call_id=call_id, status="in_progress", content=text_content("\n".join(lines))
            )
        self._progress.pop(call_id, None)
        self._child_text.pop(call_id, None)
        shown: list[ToolContent | DiffContent | TerminalContent] = []
        terminal = self.terminals.get(call_id)
        if terminal is not None:  # the command ran in the editor's terminal: keep showing it
            shown.append(TerminalContent(terminal_id=terminal))
        if event.status is ToolCallStatus.COMPLETED:
            text = event.result or ""
            diff = diff_content(event.diff, self.workspace, self.written) if event.diff else None
            if diff is not None and event.diff is not None:  # one diff: not in the text as well
                text = without_diff(text, event.diff)
            content = [*shown, *text_content(text)]
            if diff is not None:
                content.append(diff)
            return ToolCallProgress(
                tool_call_id=call_id, status="completed", content=content, raw_output=text
            )
        error = event.error or str(event.status)  # failed, or cancelled (ACP has no such status)
        return ToolCallProgress(
            tool_call_id=call_id,
            status="failed",
            content=[*shown, *text_content(error)],
            raw_output=error,
        )


def replay(
    messages: Iterable[Message],
    workspace: Path | None,
    *,
    compaction: bool = False,
    context_size: int | None = None,
) -> Iterator[SessionUpdate]:
    """A stored history as the updates a client saw while it was made (the user's messages
    too, which the client showed itself), from what the kernel stored with each message: the
    reasoning before an answer, the kinds of the tools called, each edit's diff, the text of an
    answer cut by a cancellation, and the usage of each run (a ``usage_update`` after it, when
    ``context_size`` is known, as live). A compaction summary is a ``compaction_update`` for a
    client that takes them (``compaction``), and left out for the others (the turns it replaced
    are replayed anyway)."""
    usage = _RunUsage(context_size)
    for message in messages:
        yield from usage.next_message(message)
        yield from _replayed(message, workspace, compaction)
    yield from usage.flush()


def _replayed(
    message: Message, workspace: Path | None, compaction: bool
) -> Iterator[SessionUpdate]:
    if message.kind == "compaction":
        if compaction:
            yield CompactionUpdate(
                compaction_id=message.id, status="completed", summary=list(_blocks(message))
            )
    elif message.role is Role.USER:
        for content in _blocks(message):
            yield ContentChunk(
                session_update="user_message_chunk", content=content, message_id=message.id
            )
    elif message.role is Role.ASSISTANT:
        reasoning = _metadata(message, REASONING_KEY)
        if isinstance(reasoning, str) and reasoning:
            yield ContentChunk(
                session_update="agent_thought_chunk",
                content=TextOut(text=reasoning),
                message_id=message.id,
            )
        for content in _blocks(message):
            yield ContentChunk(
                session_update="agent_message_chunk", content=content, message_id=message.id
            )
        kinds = _metadata(message, TOOL_KINDS_KEY)
        for call in message.tool_calls or []:
            kind = kinds.get(call.id) if isinstance(kinds, dict) else None
            kind = kind if isinstance(kind, str) else builtin_kind(call.name)
            yield tool_call_start(call.id, call.name, call.arguments, kind, workspace)
    elif message.role is Role.TOOL and message.tool_call_id is not None:
        yield _result(message, workspace)


@dataclass
class _RunUsage:
    """The tokens of the run being replayed, summed from its assistant messages, given as the
    ``usage_update`` the live turn sent at its end."""

    size: int | None
    run_id: str | None = None
    used: int = 0

    def next_message(self, message: Message) -> Iterator[UsageUpdate]:
        if message.run_id != self.run_id:
            yield from self.flush()
            self.run_id = message.run_id
        usage = _metadata(message, USAGE_KEY) if message.role is Role.ASSISTANT else None
        if isinstance(usage, dict):
            with contextlib.suppress(ValidationError):
                counted = Usage.model_validate(usage)
                self.used += counted.input_tokens + counted.output_tokens

    def flush(self) -> Iterator[UsageUpdate]:
        if self.size is not None and self.used:
            yield UsageUpdate(used=self.used, size=self.size)
        self.used = 0


def _metadata(message: Message, key: str) -> Any:
    return (message.metadata or {}).get(key)


def _result(message: Message, workspace: Path | None) -> ToolCallProgress:
    """A tool's result as its last update was: an edit's with its diff, once."""
    text = _text(message)
    status: ToolStatus = "failed" if message.is_error else "completed"
    diff = _metadata(message, DIFF_KEY)
    shown = (
        diff_content(diff, workspace) if isinstance(diff, str) and not message.is_error else None
    )
    if shown is not None and isinstance(diff, str):
        text = without_diff(text, diff)
    content: list[ToolContent | DiffContent | TerminalContent] = [*text_content(text)]
    if shown is not None:
        content.append(shown)
    return ToolCallProgress(
        tool_call_id=message.tool_call_id or "",
        status=status,
        content=content,
        raw_output=text,
    )


def _blocks(message: Message) -> Iterator[ContentOut]:
    content = message.content
    if content is None:
        return
    if isinstance(content, str) or not is_blocks(content):
        text = _text(message)
        if text:
            yield TextOut(text=text)
        return
    for block in content:
        if isinstance(block, TextBlock):
            yield TextOut(text=block.text)
        elif isinstance(block, ImageBlock):
            yield ImageOut(mime_type=block.mime_type, data=block.data)
        elif isinstance(block, ResourceLinkBlock):
            yield ResourceLinkOut(uri=block.uri, name=block.name or block.uri)


def _text(message: Message) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not is_blocks(content):
        return orjson.dumps(content).decode()  # any other JSON value: its JSON text
    return "\n".join(block.text for block in content if isinstance(block, TextBlock))
