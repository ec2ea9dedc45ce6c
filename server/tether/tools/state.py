"""``state_get`` and ``state_set``: the session's ``state``, a JSON object kept across turns.

The tools reach the state through :attr:`ToolContext.state`, a :class:`SessionStateHandle` the
kernel fills in (tools never import the sessions layer). Calls of one run that change the state
are serialized, so two ``state_set`` calls of one turn both take effect. The state is capped at
:data:`MAX_STATE_BYTES` of JSON: a ``state_set`` that would go over it fails and changes nothing.
``state_set`` is of kind ``edit``: it follows ``tools.approval`` (asked about, refused or run)
like the file edits.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import orjson
from pydantic import Field

from tether.protocol.sessions import MAX_STATE_BYTES
from tether.protocol.tools import ToolKind
from tether.tools.base import SessionStateHandle, ToolContext, ToolError, ToolResult
from tether.tools.typed import ToolArguments, TypedTool

MAX_KEY_CHARS = 256
STATE_TOOL_NAMES = ("state_get", "state_set")


class StateTooLarge(ToolError):
    pass


def encoded_size(state: dict[str, Any]) -> int:
    """Bytes of the state as compact JSON: what :data:`MAX_STATE_BYTES` caps."""
    return len(orjson.dumps(state))


def check_size(state: dict[str, Any]) -> int:
    """The state's size, or :class:`StateTooLarge` when it is over the cap."""
    size = encoded_size(state)
    if size > MAX_STATE_BYTES:
        raise StateTooLarge(
            f"the session state would be {_kib(size)} of JSON; it may hold at most "
            f"{_kib(MAX_STATE_BYTES)}: nothing was changed (delete keys you no longer need)"
        )
    return size


def _kib(size: int) -> str:
    return f"{size / 1024:.1f} KiB" if size % 1024 else f"{size // 1024} KiB"


def _state_of(context: ToolContext) -> SessionStateHandle:
    if context.state is None:
        raise ToolError("there is no session state here")
    return context.state


_locks: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()


def _lock_for(state: SessionStateHandle) -> asyncio.Lock:
    """One lock per handle (the kernel makes one per run): read-modify-write stays whole."""
    lock = _locks.get(state)
    if lock is None:
        lock = _locks[state] = asyncio.Lock()
    return lock


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()


class StateGetArguments(ToolArguments):
    key: str | None = Field(
        default=None, description="the key to read; leave it out for the whole state object"
    )


class StateGet(TypedTool[StateGetArguments]):
    def __init__(self) -> None:
        super().__init__(
            name="state_get",
            description=(
                "Read the session state (a JSON object kept across turns): the value of one key, "
                "or the whole object. Answers with JSON text."
            ),
            kind=ToolKind.READ,
            arguments_model=StateGetArguments,
        )

    async def call(self, args: StateGetArguments, context: ToolContext) -> ToolResult:
        state = await _state_of(context).get()
        if args.key is None:
            return ToolResult(_dump(state))
        if args.key not in state:
            keys = ", ".join(state) or "none"
            raise ToolError(f"no key {args.key!r} in the session state (keys: {keys})")
        return ToolResult(_dump(state[args.key]))


class StateSetArguments(ToolArguments):
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS, description="the key to set")
    value: Any = Field(default=None, description="any JSON value to store under the key")
    delete: bool = Field(default=False, description="true: remove the key instead")


class StateSet(TypedTool[StateSetArguments]):
    def __init__(self) -> None:
        super().__init__(
            name="state_set",
            description=(
                "Set a key of the session state (a JSON object kept across turns) to any JSON "
                f"value, or remove it with delete: true. The state holds at most "
                f"{MAX_STATE_BYTES // 1024} KiB."
            ),
            # a write the model makes, kept across turns and read back into later prompts: it
            # follows tools.approval like the other edits
            kind=ToolKind.EDIT,
            arguments_model=StateSetArguments,
        )

    async def call(self, args: StateSetArguments, context: ToolContext) -> ToolResult:
        given = "value" in args.model_fields_set
        if args.delete and given:
            raise ToolError("give either value or delete: true, not both")
        if not args.delete and not given:
            raise ToolError("value is required (or delete: true to remove the key)")
        handle = _state_of(context)
        async with _lock_for(handle):
            state = await handle.get()
            if args.delete:
                if args.key not in state:
                    return ToolResult(f"{args.key!r} was not set: nothing to delete")
                del state[args.key]
                await handle.set(state)
                return ToolResult(f"deleted {args.key!r}")
            state[args.key] = args.value
            size = check_size(state)
            await handle.set(state)
        return ToolResult(f"set {args.key!r} (the state is now {size} bytes of JSON)")


def state_tools() -> list[StateGet | StateSet]:
    return [StateGet(), StateSet()]
