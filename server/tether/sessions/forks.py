"""What both stores share about forks: where a fork may start, what it may change of its
parent's fields (it narrows the allow-lists, never widens them), and how its prefix is described.

A session's history is a chain of inherited segments followed by its own messages. A segment is
``(owner, upto)``: the first ``upto`` messages stored under ``owner`` (the id under which some
session keeps its own messages). A fork inherits its parent's chain cut at the fork point, plus
the parent's own messages up to there: no message is copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tether.protocol import ForkSessionParams, InvalidParams, Message, Role

Owner = TypeVar("Owner")

ALLOW_LISTS = {"tools": "tools", "allowed_models": "allowedModels"}
"""A session's allow-lists (field name -> wire name): a fork narrows them, never widens them."""
WIDENS = "widens"


def forked_fields(parent: Mapping[str, Any], params: ForkSessionParams) -> dict[str, Any]:
    """The fields ``params`` gives the fork in place of its parent's (``title`` and the
    allow-lists). An allow-list that would allow what the parent's does not (a name it lacks,
    or ``null``: everything) is refused with ``-32602``, naming the widened entries:
    ``data: {fields: [{field, message, type: "widens"}], widened: {field: [...] | null},
    allowed: {field: [...]}}``. ``parent`` holds the parent's fields, by field name."""
    given = {name: getattr(params, name) for name in ("title", *ALLOW_LISTS)}
    given = {name: value for name, value in given.items() if name in params.model_fields_set}
    widened = {
        name: extra
        for name in ALLOW_LISTS
        if name in given and (extra := _widened(parent[name], given[name])) != []
    }
    if widened:
        raise _widening(widened, {name: parent[name] for name in widened})
    return {
        name: list(value) if isinstance(value, list) else value for name, value in given.items()
    }


def _widened(allowed: Sequence[str] | None, asked: Sequence[str] | None) -> list[str] | None:
    """What ``asked`` allows that ``allowed`` does not (None: everything, ``allowed`` being a
    list; None allows everything, so nothing is widened past it)."""
    if allowed is None:
        return []
    if asked is None:
        return None
    kept = set(allowed)
    return [name for name in asked if name not in kept]


def _widening(
    widened: Mapping[str, list[str] | None], allowed: Mapping[str, Sequence[str]]
) -> InvalidParams:
    fields = []
    for name, extra in widened.items():
        field = ALLOW_LISTS[name]
        what = "every entry" if extra is None else ", ".join(extra)
        fields.append(
            {
                "field": field,
                "message": f"a fork may narrow its parent's {field}, not widen it: {what} "
                f"is not allowed there (allowed: {', '.join(allowed[name]) or 'none'})",
                "type": WIDENS,
            }
        )
    return InvalidParams(
        "; ".join(f"{f['field']}: {f['message']}" for f in fields),
        {
            "fields": fields,
            "widened": {ALLOW_LISTS[name]: extra for name, extra in widened.items()},
            "allowed": {ALLOW_LISTS[name]: list(value) for name, value in allowed.items()},
        },
    )


def check_fork_point(newest_first: Iterable[Message]) -> None:
    """Refuse a fork point inside a tool exchange.

    ``newest_first`` walks the history backwards from the fork point (inclusive). The walk stops
    at the first message that is not a tool result: if it is an assistant message whose tool
    calls are not all answered by the results seen on the way, the fork would leave them open.
    """
    answered: set[str] = set()
    for message in newest_first:
        if message.role is Role.TOOL:
            answered.add(message.tool_call_id or "")
            continue
        if message.tool_calls and any(call.id not in answered for call in message.tool_calls):
            raise InvalidParams.field(
                "atMessageId",
                "this message is inside a tool exchange (an assistant message whose tool calls "
                "are not all answered by then): fork at the last result of the exchange, "
                "or before the assistant message",
            )
        return


def cut_chain(
    chain: list[tuple[Owner, int]], own: Owner, own_count: int, keep: int
) -> list[tuple[Owner, int]]:
    """The segments that hold the first ``keep`` messages of a session."""
    segments: list[tuple[Owner, int]] = []
    for owner, upto in [*chain, (own, own_count)]:
        if keep <= 0:
            break
        take = min(upto, keep)
        if take > 0:
            segments.append((owner, take))
        keep -= take
    return segments
