"""Asking the user about a tool call with ``session/request_permission``.

The options are ``allow_once``, ``allow_always``, ``reject_once`` and ``reject_always``; the
kernel remembers the always answers with the session. A ``cancelled`` outcome (the client sends
it for a turn it cancelled) is a rejection, and so is an error response or an answer that names
no offered option.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from tether.acp.models import (
    PermissionOption,
    RequestPermissionRequest,
    RequestPermissionResponse,
    ToolCallFields,
)
from tether.acp.tool_calls import proposed_content, raw_input, starting_call
from tether.acp.updates import text_content
from tether.acp.wire import AcpWire, ClientError
from tether.kernel.approval import ApprovalError
from tether.protocol.kernel import PermissionParams, PermissionResult
from tether.protocol.tools import ToolKind

if TYPE_CHECKING:
    from tether.acp.agent import AcpSessionState

Outcome = Literal["allow", "allow_always", "reject", "reject_always"]
OPTIONS = [
    PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
    PermissionOption(option_id="reject_always", name="Always reject", kind="reject_always"),
]
_OUTCOMES: dict[str, Outcome] = {
    "allow_once": "allow",
    "allow_always": "allow_always",
    "reject_once": "reject",
    "reject_always": "reject_always",
}


async def ask(
    connection: AcpWire, params: PermissionParams, state: AcpSessionState, workspace: Path | None
) -> PermissionResult:
    kind = state.kinds.get(params.tool_call.id, ToolKind.OTHER)
    option = await _question(connection, params, kind, workspace)
    return PermissionResult(outcome=_OUTCOMES[option] if option else "reject")


async def _question(
    connection: AcpWire, params: PermissionParams, kind: str, workspace: Path | None
) -> str | None:
    """The option the user picked (None: the turn was cancelled)."""
    call = params.tool_call
    args = raw_input(call.arguments)
    tool_call = _tool_call(call.id, call.name, args, kind, workspace)
    if params.reason is not None:  # a protected path: asked whatever the policy, and why
        tool_call.content = [*text_content(f"Needs your approval: {params.reason}.")]
    if params.diff is not None:  # what allowing the edit lets it make
        tool_call.content = [*(tool_call.content or []), proposed_content(params.diff, workspace)]
    request = RequestPermissionRequest(
        session_id=params.session_id, tool_call=tool_call, options=OPTIONS
    )
    try:
        answer = await connection.request("session/request_permission", request.to_wire())
    except ClientError as exc:
        code = f" with error {exc.code}" if exc.code is not None else ""
        raise ApprovalError(
            f"the client answered session/request_permission{code}: {exc.message}"
        ) from None
    except ConnectionError:
        raise ApprovalError("the client went away before it answered") from None
    try:
        outcome = RequestPermissionResponse.model_validate(answer).outcome
    except ValidationError:
        raise ApprovalError(
            "the client's answer to session/request_permission is malformed"
        ) from None
    if outcome.outcome == "cancelled":
        return None
    if outcome.option_id not in _OUTCOMES:
        raise ApprovalError(
            f"the client picked an option that was not offered: {outcome.option_id!r}"
        )
    return outcome.option_id


def _tool_call(
    call_id: str, name: str, args: object, kind: str, workspace: Path | None
) -> ToolCallFields:
    return ToolCallFields(**starting_call(call_id, name, args, kind, workspace))
