"""Regular expressions a walk matches paths with, which cannot run past the walk's deadline.

The patterns of ignore files come from the repository and globs from the model, and the paths
they are matched against from the repository too: a pattern such as ``**/a*/**/a*/**/a*/**/x``
backtracks for minutes over a path like ``a/a/a/…/a`` with ``re``, which can be neither stopped
nor interrupted, and holds the interpreter while it runs (the server would answer nothing). A
backtracking matcher's worst case grows with the path length to the power of the pattern's
unbounded repeats (``*``, ``+``): with at most two it stays within about a tenth of a second even
for a path of 4096 characters, so such patterns (most of them: ``*.log``, ``build/``,
``src/**/*.py``) run on ``re``, the fastest. The others run on the ``regex`` engine, with a
timeout (which raises :class:`TimeoutError`) and without holding the interpreter.
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import regex

SAFE_REPEATS = 2  # unbounded repeats a pattern may have and still run on re


class TimedRegex:
    """A compiled pattern whose matching stops at a deadline (``time.monotonic()`` seconds)."""

    __slots__ = ("_compiled", "_safe", "_timed")

    def __init__(self, compiled: re.Pattern[str]) -> None:
        """``compiled`` by ``re`` (which also says whether the pattern is valid: ``re.error``);
        compiled again by ``regex`` when it may backtrack too much for ``re``, on its first use
        (``regex`` compiles slowly, and most of an ignore file's patterns are never tried)."""
        self._compiled = compiled
        self._safe = unbounded_repeats(compiled.pattern) <= SAFE_REPEATS
        self._timed: regex.Pattern[str] | None = None

    def search(self, text: str, deadline: float) -> dict[str, Any] | None:
        """The named groups of the first match in ``text`` (None: no match)."""
        if self._safe:
            found: Any = self._compiled.search(text)
        else:
            left = _left(deadline)
            found = self._engine().search(text, timeout=left, concurrent=True)
        return None if found is None else found.groupdict()

    def fullmatch(self, text: str, deadline: float) -> bool:
        if self._safe:
            return self._compiled.fullmatch(text) is not None
        left = _left(deadline)
        return self._engine().fullmatch(text, timeout=left, concurrent=True) is not None

    def _engine(self) -> regex.Pattern[str]:
        if self._timed is None:
            import regex  # ~10 ms, imported by the first pattern that needs it

            self._timed = regex.compile(self._compiled.pattern, self._compiled.flags & ~re.UNICODE)
        return self._timed


def _left(deadline: float) -> float | None:
    """The seconds left before ``deadline`` (None: no deadline, which ``regex`` spells so)."""
    if math.isinf(deadline):
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    return left


def unbounded_repeats(pattern: str) -> int:
    """How many ``*``, ``+`` and ``{n,}`` quantifiers ``pattern`` has (outside classes and
    escapes): a bound on the degree of its backtracking."""
    count = 0
    index, length = 0, len(pattern)
    in_class = False
    while index < length:
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern.startswith("]", index + 1) or pattern.startswith("^]", index + 1):
                index += 2 if pattern[index + 1] == "]" else 3  # a ']' first is a member
                continue
        elif char in "*+" or (char == "{" and re.match(r"\{\d*,\}", pattern[index:])):
            count += 1
        index += 1
    return count
