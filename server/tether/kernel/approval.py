"""Approval of tool calls: tools that edit or execute run only when the policy lets them.

The policy is ``tools.approval``:

- ``ask`` (the default): the client is asked (``tool/requestPermission``) through the
  :class:`Approver` the kernel was given; ``allow`` runs the call, ``allow_always`` runs it and
  every later call of that tool in the session without asking again, ``reject`` refuses it. Without
  an approver (the client did not declare ``capabilities.tether.permissions``) the call is refused
  with a message saying how to change the policy: never a wait nobody can end.
- ``auto``: every call runs.
- ``deny``: every such call is refused.

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

from tether.protocol import ToolCall
from tether.protocol.kernel import PermissionParams, PermissionResult, PermissionToolCall
from tether.protocol.tools import ProposedChange, ToolKind, ToolSpec
from tether.tools.base import ToolResult
from tether.tools.titles import call_title

logger = logging.getLogger(__name__)

Policy = Literal["ask", "auto", "deny"]

NEEDS_APPROVAL = frozenset({ToolKind.EDIT, ToolKind.EXECUTE})
REJECTED_RESULT = "rejected by user"


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


@dataclass
class Approvals:
    """What the kernel knows across runs: the approver, and the tools each session allowed
    always (in memory, until the session is deleted or tether exits)."""

    approver: Approver | None = None
    _always: dict[str, set[str]] = field(default_factory=dict)

    def gate(self, policy: Policy, session_id: str, run_id: str) -> Gate:
        always = self._always.setdefault(session_id, set()) if policy == "ask" else set()
        return Gate(
            policy=policy,
            approver=self.approver,
            always=always,
            session_id=session_id,
            run_id=run_id,
        )

    def forget(self, session_id: str) -> None:
        """Drop what a deleted session allowed always."""
        self._always.pop(session_id, None)


@dataclass(kw_only=True)
class Gate:
    """One run's approval of its calls. Questions go to the client one at a time, so an
    ``allow_always`` answer spares the questions about the same tool still waiting."""

    policy: Policy
    approver: Approver | None
    always: set[str]
    session_id: str
    run_id: str
    _asking: asyncio.Lock = field(default_factory=asyncio.Lock)

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
        if protected is not None:
            return await self._check_protected(spec, call, protected, change)
        if spec.kind not in NEEDS_APPROVAL or self.policy == "auto":
            return None
        if self.policy == "deny":
            return _denied(spec, call)
        if self.approver is None:
            return _cannot_ask(spec, call)
        async with self._asking:
            if call.name in self.always:
                return None
            return await self._ask(self.approver, spec, call, change=change)

    async def _check_protected(
        self, spec: ToolSpec, call: ToolCall, reason: str, change: ProposedChange | None
    ) -> ToolResult | None:
        """Asked under ``ask`` and ``auto`` alike, never answered by an earlier
        ``allow_always``; refused under ``deny`` and when nobody can be asked."""
        if self.policy == "deny":
            return _denied(spec, call)
        if self.approver is None:
            return _cannot_ask_protected(call, reason)
        async with self._asking:
            return await self._ask(self.approver, spec, call, reason, change)

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
        if answer.outcome == "reject":
            return _refused(REJECTED_RESULT)
        if answer.outcome == "allow_always" and reason is None:
            self.always.add(call.name)  # a protected write is allowed once, whatever the answer
        return None


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
