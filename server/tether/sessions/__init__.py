"""Sessions: the store protocol, the in-memory store and the service behind ``session/*``.

Each name is imported from its module on first use (:pep:`562`), so that a light module of the
package (:mod:`tether.sessions.ids`, :mod:`tether.sessions.workspaces`) loads without the store
and the session models: the handshake needs those alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.sessions.in_memory import MemoryStore
    from tether.sessions.service import SessionService
    from tether.sessions.store import SessionStore

__all__ = ["MemoryStore", "SessionService", "SessionStore"]

_WHERE: dict[str, str] = {
    "MemoryStore": "in_memory",
    "SessionService": "service",
    "SessionStore": "store",
}
"""The module of :mod:`tether.sessions` each name of ``__all__`` is defined in."""


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
