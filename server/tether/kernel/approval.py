"""Approval of tool calls: tools that edit or execute run only when the policy lets them.

The policy is ``tools.approval``:

- ``ask`` (the default): the client is asked (``tool/requestPermission``) through the
  :class:`Approver` the kernel was given; ``allow`` runs the call, ``allow_always`` runs it and
  every later call of that tool in the session without asking again, ``reject`` refuses it,
  ``reject_always`` refuses it and every later call of that tool in the session. Without
  an approver (the client did not declare ``capabilities.tether.permissions``) the call is refused
  with a message saying how to change the policy: never a wait nobody can end.
- ``auto``: every call runs.
- ``deny``: every such call is refused.

The always answers are remembered with the session in the store (``Session.permissions``), so
every process sharing the store honours them. A ``reject_always`` holds under every policy.

The session's mode (``Session.mode``, read from the store at each call that needs approval, so a
mode set meanwhile, in any process, holds at once) only narrows the policy:

- ``ask``: the policy as it is;
- ``accept_edits``: under ``ask``, calls of ``edit`` tools run without asking; ``execute`` tools
  are still asked about;
- ``read_only``: only ``read`` and ``search`` tools are offered (:func:`offered`), and a call of
  any other kind is refused.

A call that writes to a protected path (``.tether/``, ``.git/``: :mod:`tether.tools.protected`) is
asked about under ``ask`` and ``auto`` alike, with the reason in the question; an earlier
``allow_always`` does not answer it, and its own ``allow_always`` allows that call only. Without
an approver it is refused with the reason; under ``deny`` like any other.

A refusal is an error result the model reads; the run goes on. The kernel does not know how the
client is asked: the approver is injected (``rpc`` sends a request to the editor).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from tether.protocol import Session, ToolCall
from tether.protocol.kernel import PermissionParams, PermissionResult, PermissionToolCall
from tether.protocol.sessions import SessionFields, ToolPermissions
from tether.protocol.tools import ProposedChange, ToolKind, ToolSpec
from tether.sessions.store import SessionStore
from tether.tools.base import ToolResult
from tether.tools.titles import call_title

logger = logging.getLogger(__name__)

Policy = Literal["ask", "auto", "deny"]

NEEDS_APPROVAL = frozenset({ToolKind.EDIT, ToolKind.EXECUTE})
READ_ONLY_KINDS = frozenset({ToolKind.READ, ToolKind.SEARCH})
REJECTED_RESULT = "rejected by user"
ACCEPT_EDITS = "accept_edits"
READ_ONLY = "read_only"


def offered(specs: list[ToolSpec], mode: str) -> list[ToolSpec]:
    """The tools a run in ``mode`` offers the model: under ``read_only``, those whose kind
    reads or searches (by kind, so an MCP tool that declares itself so is kept)."""
    if mode != READ_ONLY:
        return specs
    return [spec for spec in specs if spec.kind in READ_ONLY_KINDS]


class ApprovalError(Exception):
    """The client could not give an answer (it answered with an error, or with something that
    is not an outcome). The message says what happened; the call is refused.

    Hierarchy::

        ApprovalError
        └── CannotAsk    nobody can be asked (the client did not declare the capability)
    """


class CannotAsk(ApprovalError):
    """The approver has nobody to ask: refused as when there is no approver at all."""


Approver = Callable[[PermissionParams], Awaitable[PermissionResult]]
"""Asks the user about one call. Raises :class:`ApprovalError` when no answer can be had;
cancelling the await withdraws the question."""


@dataclass(kw_only=True)
class Gate:
    """One run's approval of its calls. Questions go to the client one at a time, so an
    always answer spares the questions about the same tool still waiting."""

    policy: Policy
    approver: Approver | None
    store: SessionStore
    session: Session  # as the run found it: what holds should the store not answer
    run_id: str
    _asking: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def session_id(self) -> str:
        return self.session.session_id

    async def check(
        self,
        spec: ToolSpec,
        call: ToolCall,
        protected: str | None = None,
        change: ProposedChange | None = None,
    ) -> ToolResult | None:
        """``None`` when the call may run, else the error result that refuses it. ``protected``
        is why the call needs explicit approval whatever the policy (it writes to a protected
        path); ``None`` then means the user allowed this very call. ``change`` is what an edit
        proposes, shown with the question."""
        if protected is None and spec.kind not in NEEDS_APPROVAL:
            return None
        if self.policy == "deny":
            return _denied(spec, call)
        decided = await self._decide(spec, call, protected)
        if not isinstance(decided, _Ask):
            return decided
        async with self._asking:  # an always answer given meanwhile may decide it now
            decided = await self._decide(spec, call, protected)
            if not isinstance(decided, _Ask):
                return decided
            return await self._ask(decided.approver, spec, call, protected, change)

    async def _decide(
        self, spec: ToolSpec, call: ToolCall, protected: str | None
    ) -> ToolResult | _Ask | None:
        """What the mode, the remembered answers and the policy decide (:class:`_Ask`: the user
        is to be asked)."""
        mode, remembered = await self._current()
        if mode == READ_ONLY:
            return _read_only(spec, call)
        if call.name in remembered.reject_always:
            return _refused(REJECTED_RESULT)
        if protected is not None:  # asked under ask and auto alike, whatever was answered before
            if self.approver is None:
                return _cannot_ask_protected(call, protected)
            return _Ask(self.approver)
        if self.policy == "auto" or call.name in remembered.allow_always:
            return None
        if mode == ACCEPT_EDITS and spec.kind == ToolKind.EDIT:
            return None
        if self.approver is None:
            return _cannot_ask(spec, call)
        return _Ask(self.approver)

    async def _current(self) -> tuple[str, ToolPermissions]:
        """The session's mode and remembered answers now (another process, or the client
        meanwhile, may have changed them); as last known when the store cannot be read."""
        try:
            self.session = await self.store.get(self.session_id)
        except Exception as exc:  # a fault, or a session deleted meanwhile
            logger.warning("could not read the mode of session %s: %s", self.session_id, exc)
        return self.session.mode, self.session.permissions

    async def _ask(
        self,
        approver: Approver,
        spec: ToolSpec,
        call: ToolCall,
        reason: str | None = None,
        change: ProposedChange | None = None,
    ) -> ToolResult | None:
        params = PermissionParams(
            session_id=self.session_id,
            run_id=self.run_id,
            tool_call=PermissionToolCall(
                id=call.id,
                name=call.name,
                arguments=call.arguments,
                title=call_title(call.name, call.arguments),
            ),
            reason=reason,
            diff=change,
        )
        try:
            answer = await approver(params)
        except CannotAsk:
            if reason is not None:
                return _cannot_ask_protected(call, reason)
            return _cannot_ask(spec, call)
        except ApprovalError as exc:
            return _refused(f"{call.name} refused: {exc}")
        except Exception:
            logger.exception("asking for permission to run %s failed", call.name)
            return _refused(f"{call.name} refused: the permission request failed")
        if answer.outcome == "reject_always":
            await self._remember(call.name, rejected=True)
        if answer.outcome in ("reject", "reject_always"):
            return _refused(REJECTED_RESULT)
        if answer.outcome == "allow_always" and reason is None:
            await self._remember(call.name, rejected=False)  # a protected write: allowed once
        return None

    async def _remember(self, tool: str, *, rejected: bool) -> None:
        """Keep an always answer with the session, for every later run in every process (for
        this run alone should the store not take it)."""
        remembered = self.session.permissions
        allow = [name for name in remembered.allow_always if name != tool]
        reject = [name for name in remembered.reject_always if name != tool]
        (reject if rejected else allow).append(tool)
        permissions = ToolPermissions(allow_always=allow, reject_always=reject)
        self.session = self.session.model_copy(update={"permissions": permissions})
        try:
            self.session = await self.store.configure(
                self.session_id, SessionFields(permissions=permissions)
            )
        except Exception as exc:
            logger.warning(
                "could not remember the answer about %s in session %s: %s",
                tool,
                self.session_id,
                exc,
            )


@dataclass(frozen=True, slots=True)
class _Ask:
    """The decision to ask the user, through ``approver``."""

    approver: Approver


def _read_only(spec: ToolSpec, call: ToolCall) -> ToolResult:
    return _refused(
        f"{call.name} ({spec.kind} tool) refused: the session's mode is read_only, which "
        "allows only tools that read and search"
    )


def _denied(spec: ToolSpec, call: ToolCall) -> ToolResult:
    return _refused(
        f'{call.name} ({spec.kind} tool) refused: the approval policy tools.approval is "deny"'
    )


def _cannot_ask_protected(call: ToolCall, reason: str) -> ToolResult:
    return _refused(
        f"{call.name} refused: {reason}, so they always need your explicit approval, and the "
        "client cannot be asked (it did not declare capabilities.tether.permissions)"
    )


def _cannot_ask(spec: ToolSpec, call: ToolCall) -> ToolResult:
    return _refused(
        f"{call.name} ({spec.kind} tool) needs approval, but the client cannot be asked "
        "(it did not declare capabilities.tether.permissions); refused. Set "
        'tools.approval to "auto" to run such tools without asking, or use a client '
        "that answers tool/requestPermission"
    )


def _refused(text: str) -> ToolResult:
    return ToolResult(text, is_error=True)
