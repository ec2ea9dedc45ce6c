"""Sessions: the store protocol, the in-memory store and the service behind ``session/*``."""

from tether.sessions.in_memory import MemoryStore
from tether.sessions.service import SessionService
from tether.sessions.store import SessionStore

__all__ = ["MemoryStore", "SessionService", "SessionStore"]
