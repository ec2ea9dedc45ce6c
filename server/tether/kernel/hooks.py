"""Hooks: the user's own commands, run on the events of a run (``[[hooks.<event>]]``).

The shape is the one Claude Code made familiar (and Codex and Gemini CLI took up): the command
gets a JSON object on stdin (``hook_event_name``, ``session_id``, ``run_id``, ``cwd`` and what
the event is about) and answers with its exit code:

- 0: go on. Its stdout, when it is a JSON object, may say ``{"decision": "block", "reason"}``,
  ``{"additionalContext": "..."}`` or, before a tool call, ``{"updatedInput": {...}}`` (the
  same keys under ``hookSpecificOutput`` are read too). For ``user_prompt_submit`` and
  ``session_start``, stdout that is not JSON is context as it is.
- 2: block, with its stderr as the reason.
- anything else (or a hook that cannot start, or times out): a warning; the run goes on.

Hooks are user configuration only (:data:`tether.config.WORKSPACE_REFUSED`): a hook runs outside
the sandbox, in the session's workspace, with the environment commands get (secrets stripped,
:func:`tether.tools.run_command.child_environment`). A hook that outlives its timeout is killed
with its whole process tree (:func:`tether.tools.processes.kill_tree`: its group, its
descendants and every process carrying its mark). Whatever a hook says that reaches the model or
the client has the configured secrets redacted.

The hooks of one event run one after the other, in the order configured: a later one sees the
input an earlier one updated, and the first that blocks ends the event.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.config import HookConfig, HooksConfig
from tether.protocol.kernel import HookEventName, HookRun, Notice, ProgressEvent
from tether.tools.base import ToolContext
from tether.tools.processes import MARK_VARIABLE, kill_tree, new_mark
from tether.tools.run_command import SHELL, child_environment

BLOCK_EXIT_CODE = 2
KILL_WAIT_SECONDS = 5.0  # for a killed hook's end to be seen
MAX_OUTPUT_CHARS = 64 * 1024  # of what a hook says that is kept (reason, context)
MAX_NAME_CHARS = 80
PLAIN_CONTEXT_EVENTS: frozenset[str] = frozenset({"user_prompt_submit", "session_start"})
TOOL_EVENTS: frozenset[str] = frozenset({"pre_tool_use", "post_tool_use"})

Emit = Callable[[ProgressEvent], None]
Outcome = Literal["ok", "blocked", "error", "timeout"]


@dataclass(frozen=True)
class HookVerdict:
    """What the hooks of one event decided: ``blocked`` is the reason when one blocked;
    ``context`` what they asked to add for the model; ``updated_input`` the tool arguments
    the last of them that updated them gave (pre_tool_use)."""

    blocked: str | None = None
    context: str | None = None
    updated_input: dict[str, Any] | None = None
    blocked_by: str | None = None  # the name of the hook that blocked


@dataclass(frozen=True)
class _Ran:
    exit_code: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    seconds: float


class Hooks:
    """The hooks of one run: what the configuration gives, run in the run's context."""

    def __init__(self, config: HooksConfig, context: ToolContext) -> None:
        self._config = config
        self._context = context

    def has(self, event: HookEventName, tool_name: str | None = None) -> bool:
        return bool(self._matching(event, tool_name))

    async def run(
        self,
        event: HookEventName,
        fields: Mapping[str, Any],
        emit: Emit,
        *,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
    ) -> HookVerdict:
        """Run the hooks of ``event`` (those whose matcher takes ``tool_name``, for the tool
        events) with ``fields`` added to the input; each run is a ``hook`` progress event."""
        payload = self._payload(event, fields)
        contexts: list[str] = []
        updated: dict[str, Any] | None = None
        for hook in self._matching(event, tool_name):
            ran = await self._execute(hook, payload)
            verdict, outcome, message = _judge(event, ran)
            emit(
                HookRun(
                    name=self._redact(_name(hook)),
                    event=event,
                    outcome=outcome,
                    duration_ms=round(ran.seconds * 1000, 3),
                    tool_call_id=tool_call_id,
                    exit_code=ran.exit_code,
                    message=None if message is None else self._redact(message),
                )
            )
            if outcome in ("error", "timeout"):
                emit(Notice(message=self._redact(f"hook {_name(hook)!r} ({event}): {message}")))
            if verdict.context:
                contexts.append(verdict.context)
            if verdict.updated_input is not None:
                updated = verdict.updated_input
                payload = {**payload, "tool_input": updated}
            if verdict.blocked is not None:
                return self._redacted(
                    HookVerdict(
                        blocked=verdict.blocked, context=_joined(contexts), blocked_by=_name(hook)
                    )
                )
        return self._redacted(HookVerdict(context=_joined(contexts), updated_input=updated))

    def _matching(self, event: HookEventName, tool_name: str | None) -> list[HookConfig]:
        hooks: list[HookConfig] = getattr(self._config, event)
        if event not in TOOL_EVENTS:
            return hooks
        return [hook for hook in hooks if matches(hook.matcher, tool_name or "")]

    def _payload(self, event: HookEventName, fields: Mapping[str, Any]) -> dict[str, Any]:
        context = self._context
        return {
            "hook_event_name": event,
            "session_id": context.session_id,
            "run_id": context.run_id,
            "cwd": str(context.workspace),
            **fields,
        }

    async def _execute(self, hook: HookConfig, payload: Mapping[str, Any]) -> _Ran:
        """Run ``hook`` to its end or its timeout; a cancelled run kills it the same way."""
        context = self._context
        mark = new_mark()
        environment = child_environment(os.environ, context.hidden_env, context.secrets)
        environment[MARK_VARIABLE] = mark
        started = time.monotonic()
        try:
            process = await _start(hook.command, context, environment, mark)
        except OSError as exc:
            return _Ran(127, "", f"could not start: {exc.strerror or exc}", 0.0)
        ended = False
        try:
            stdout, stderr = await asyncio.wait_for(
                process.communicate(json.dumps(payload).encode()), hook.timeout
            )
            ended = True
        except TimeoutError:
            stdout, stderr = b"", b""
        finally:
            if not ended:  # timed out, or the run was cancelled: nothing of it stays
                # The leader leads its group, which kill_tree kills: no process.kill() after it
                # (its poll would reap the leader behind asyncio's back).
                kill_tree(process.pid, mark, leader_exited=process.returncode is not None)
                # Bounded: asyncio's wait also waits for the pipes, which a process out of
                # reach (another user's, say) could hold open.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), KILL_WAIT_SECONDS)
        return _Ran(
            process.returncode if ended else None,
            _text(stdout),
            _text(stderr),
            time.monotonic() - started,
        )

    def _redact(self, text: str) -> str:
        return self._context.secrets.redact(text)

    def _redacted(self, verdict: HookVerdict) -> HookVerdict:
        """``verdict`` without the configured secrets in what reaches the model or the client
        (the arguments of an updated call are the tool's to judge, as the model's own are)."""
        secrets = self._context.secrets
        if not secrets:
            return verdict
        return HookVerdict(
            blocked=None if verdict.blocked is None else secrets.redact(verdict.blocked),
            context=None if verdict.context is None else secrets.redact(verdict.context),
            updated_input=verdict.updated_input,
            blocked_by=None if verdict.blocked_by is None else secrets.redact(verdict.blocked_by),
        )


async def _start(
    command: str, context: ToolContext, environment: dict[str, str], mark: str
) -> asyncio.subprocess.Process:
    """Start a hook. The start is shielded: a cancellation that arrives meanwhile waits for
    it, then kills what started, so that no hook is left running unseen."""
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            SHELL,
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=context.workspace,
            env=environment,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            process = await starting
            kill_tree(process.pid, mark)
        raise


def tool_input(arguments: str) -> object:
    """A call's arguments as the hook reads them: the JSON object (the text, if it is none)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def matches(matcher: str, tool_name: str) -> bool:
    """Whether ``matcher`` (globs, ``|`` between alternatives) takes ``tool_name``."""
    return any(
        fnmatch.fnmatchcase(tool_name, pattern.strip())
        for pattern in matcher.split("|")
        if pattern.strip()
    )


def _judge(event: HookEventName, ran: _Ran) -> tuple[HookVerdict, Outcome, str | None]:
    """What a hook's run means: its verdict, its outcome and the event's message."""
    if ran.exit_code is None:
        return HookVerdict(), "timeout", "killed at its timeout"
    if ran.exit_code == BLOCK_EXIT_CODE:
        reason = ran.stderr.strip() or ran.stdout.strip() or "blocked by a hook"
        return HookVerdict(blocked=reason), "blocked", reason
    if ran.exit_code != 0:
        last = ran.stderr.strip().rsplit("\n", 1)[-1][:MAX_NAME_CHARS]
        return HookVerdict(), "error", f"exit code {ran.exit_code}" + (f": {last}" if last else "")
    verdict = _answer(event, ran.stdout)
    if verdict.blocked is not None:
        return verdict, "blocked", verdict.blocked
    return verdict, "ok", None


def _answer(event: HookEventName, stdout: str) -> HookVerdict:
    """The verdict of a hook that exited 0, from its stdout."""
    text = stdout.strip()
    answer: object = None
    if text.startswith("{"):
        with contextlib.suppress(ValueError):
            answer = json.loads(text)
    if not isinstance(answer, dict):
        plain = text if event in PLAIN_CONTEXT_EVENTS and text else None
        return HookVerdict(context=plain)
    specific = answer.get("hookSpecificOutput")
    fields = {**(specific if isinstance(specific, dict) else {}), **answer}
    context = fields.get("additionalContext")
    updated = fields.get("updatedInput")
    if fields.get("decision") == "block":
        reason = fields.get("reason")
        blocked = reason if isinstance(reason, str) and reason.strip() else "blocked by a hook"
        return HookVerdict(blocked=blocked)
    return HookVerdict(
        context=context if isinstance(context, str) and context else None,
        updated_input=updated if event == "pre_tool_use" and isinstance(updated, dict) else None,
    )


def _name(hook: HookConfig) -> str:
    name = hook.name or hook.command
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"


def _text(data: bytes) -> str:
    return data[:MAX_OUTPUT_CHARS].decode("utf-8", errors="replace")


def _joined(contexts: list[str]) -> str | None:
    return "\n\n".join(contexts) or None
