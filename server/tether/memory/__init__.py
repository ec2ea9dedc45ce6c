"""Memory: Markdown files from ``memory.paths`` that are appended to the system prompt."""

from tether.memory.errors import MemoryLoadError
from tether.memory.loader import (
    DEFAULT_MAX_MEMORY_BYTES,
    DEFAULT_MEMORY_PATH,
    Memory,
    MemoryEntry,
    load_memory,
    read_memory,
    render_memory,
    surely_no_memory,
)

__all__ = [
    "DEFAULT_MAX_MEMORY_BYTES",
    "DEFAULT_MEMORY_PATH",
    "Memory",
    "MemoryEntry",
    "MemoryLoadError",
    "load_memory",
    "read_memory",
    "render_memory",
    "surely_no_memory",
]
