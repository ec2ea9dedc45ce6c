"""Sessions: the store protocol, the in-memory store and the service behind ``session/*``.

Each name is imported from its module on first use (:pep:`562`), so that a light module of the
package (:mod:`tether.sessions.ids`, :mod:`tether.sessions.workspaces`) loads without the store
and the session models: the handshake needs those alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.protocol.lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, _WHERE)
