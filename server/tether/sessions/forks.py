"""What both stores share about forks: where a fork may start, and how its prefix is described.

A session's history is a chain of inherited segments followed by its own messages. A segment is
``(owner, upto)``: the first ``upto`` messages stored under ``owner`` (the id under which some
session keeps its own messages). A fork inherits its parent's chain cut at the fork point, plus
the parent's own messages up to there: no message is copied.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from tether.protocol import InvalidParams, Message, Role

Owner = TypeVar("Owner")


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
