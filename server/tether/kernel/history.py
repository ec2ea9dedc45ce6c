"""The session's history in the order a model accepts it.

Providers want each assistant tool call followed at once by its result, one result per call. A
session may hold other shapes: a client appended a user message after a call a killed run left
unanswered (the next run then answers it "interrupted", after that message), or appended the real
result after such an "interrupted" one. The session keeps what it was given; the model is sent
each call's first result right after the call, and nothing else for it.
"""

from __future__ import annotations

from tether.protocol import Message, Role


def in_model_order(history: list[Message]) -> list[Message]:
    """``history`` with every tool result moved right after the call it answers; second results
    of a call and results of no earlier call are left out. One pass; the same list when it is
    already in order."""
    first_results: dict[str, Message] = {}
    for message in history:
        call_id = message.tool_call_id
        if message.role is Role.TOOL and call_id is not None:
            first_results.setdefault(call_id, message)
    ordered: list[Message] = []
    for message in history:
        if message.role is Role.TOOL:
            continue
        ordered.append(message)
        for call in message.tool_calls or ():
            result = first_results.pop(call.id, None)
            if result is not None:
                ordered.append(result)
    if len(ordered) == len(history) and all(a is b for a, b in zip(ordered, history, strict=True)):
        return history
    return ordered
