"""Access control of a run: the session's allow-lists of tools and models.

A ``kernel/run`` that asks for a tool outside the session's ``tools``, or that would use a model
outside its ``allowedModels``, is refused with ``-32602`` InvalidParams before anything is
recorded. ``data`` is ``{fields: [{field, message, type: "not_allowed"}], allowed, refused}``,
``field`` being ``tools`` or ``model``.

Within those limits the model is offered the tools that the configuration enables, the session's
list and the run's list all name (a name no tool has is ignored).
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.protocol import InvalidParams, Session
from tether.protocol.kernel import RunParams

NOT_ALLOWED = "not_allowed"


def check_access(session: Session, params: RunParams, model: str | None) -> None:
    """Refuse a run that the session's allow-lists forbid; ``model`` is the effective one
    (run, else session, else configuration)."""
    _check_tools(session, params.tools)
    _check_model(session, params, model)


def _check_tools(session: Session, run_tools: list[str] | None) -> None:
    if run_tools is None or session.tools is None:
        return
    allowed = set(session.tools)
    refused = [name for name in run_tools if name not in allowed]
    if refused:
        raise not_allowed(
            "tools",
            f"{', '.join(refused)} {'is' if len(refused) == 1 else 'are'} outside this "
            f"session's tools (allowed: {', '.join(session.tools) or 'none'})",
            allowed=session.tools,
            refused=refused,
        )


def _check_model(session: Session, params: RunParams, model: str | None) -> None:
    allowed = session.allowed_models
    if allowed is None or (model is not None and model in allowed):
        return
    if params.model is not None:
        whose = "the model"
    elif session.model is not None:
        whose = "the session's model"
    else:
        whose = "the configured model (provider.model)"
    shown = repr(model) if model is not None else "(none)"
    raise not_allowed(
        "model",
        f"{whose} {shown} is outside this session's allowedModels "
        f"(allowed: {', '.join(allowed) or 'none'})",
        allowed=allowed,
        refused=[model] if model is not None else [],
    )


def not_allowed(
    field: str, message: str, *, allowed: Sequence[str], refused: Sequence[str]
) -> InvalidParams:
    return InvalidParams(
        f"{field}: {message}",
        {
            "fields": [{"field": field, "message": message, "type": NOT_ALLOWED}],
            "allowed": list(allowed),
            "refused": list(refused),
        },
    )
