r"""From the Python regular expressions ``search_text`` takes to ripgrep's (Rust ``regex``).

The model writes Python patterns (the ``regex`` module, version 0: ``re``'s syntax). Most mean
the same to ripgrep; some would mean something else there, and the search would answer for
another pattern without a word. :func:`rust_pattern` rewrites what has an exact equivalent and
gives up (None) on everything else, so that the call runs on the Python engine instead:

- rewritten: ``\Z`` (``$``: rg matches lines in a buffer, where ``\z`` is past the newline),
  ``\uXXXX`` and ``\UXXXXXXXX`` (``\x{...}``), an escaped punctuation character (``\<`` is a word
  boundary to Rust, ``<`` to Python), ``{,n}`` (``{0,n}``), and a ``{`` or ``}`` that is no
  repetition (literal to Python, an error to Rust); inside a class, a ``[`` that opens no POSIX
  class (``[[:alpha:]]``) is escaped (Rust nests classes);
- given up: lookaround, backreferences (``\1``, ``(?P=name)``), atomic groups and possessive
  repeats, conditionals, recursion, comments ``(?#...)``, octal escapes, escapes of letters Rust
  lacks or reads differently (``\N{...}``, ``\G``, ``\K``, ``\X``, ``\m``, ``\b`` in a class...),
  inline flags other than ``i``, ``m``, ``s`` and global flags past the start (Python applies
  them to the whole pattern, Rust from where they stand), verbose mode, and the class operators
  ``&&``, ``--`` and ``~~`` (Rust's set operations, literal to Python).

What stays: literals, ``. ^ $ | ( ) * + ? {n,m}`` and their lazy forms, classes and ranges,
``\d \w \s \b \A`` and their negations, ``\p{...}``, ``\x..``, ``(?:...)``, ``(?P<name>...)``,
``(?<name>...)``. ``\d``, ``\w``, ``\s`` and ``\b`` are Unicode-aware in both; the few code points
where their tables differ (Python's ``\s`` also takes ``\x1c``-``\x1f``) are documented in
docs/configuration.md.
"""

from __future__ import annotations

import re

_KEPT_ESCAPES = frozenset("dDwWsSbBAafnrtv")
_FLAGS = frozenset("ims")
_REPEAT = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_HEX = frozenset("0123456789abcdefABCDEF")


class _GiveUp(Exception):
    """The pattern may mean something else to ripgrep."""


def rust_pattern(pattern: str) -> str | None:
    """``pattern`` (a valid Python pattern) as ripgrep must read it to mean the same; None
    when there is no such rewriting here."""
    try:
        return _Translator(pattern).run()
    except _GiveUp:
        return None


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.index = 0
        self.out: list[str] = []

    def run(self) -> str:
        while self.index < len(self.text):
            char = self.text[self.index]
            self.index += 1
            if char == "\\":
                self.out.append(self._escape(in_class=False))
            elif char == "[":
                self._class()
            elif char == "(":
                self._group()
            elif char in "*+?":
                self.out.append(char)
                self._possessive()
            elif char == "{":
                self._brace()
            elif char == "}":
                self.out.append("\\}")
            else:
                self.out.append(char)
        return "".join(self.out)

    def _peek(self, count: int = 1) -> str:
        return self.text[self.index : self.index + count]

    def _possessive(self) -> None:
        if self._peek() == "+":
            raise _GiveUp
        if self._peek() == "?":  # lazy: fine, but not followed by another repeat
            self.out.append("?")
            self.index += 1

    def _brace(self) -> None:
        found = _REPEAT.match(self.text, self.index - 1)
        if found is None or (found.group(1) == "" and found.group(2) is None):
            self.out.append("\\{")  # no repetition: a literal to Python
            return
        low, high = found.group(1), found.group(2)
        if low == "" and high == "":
            raise _GiveUp  # {,}
        self.out.append("{" + (low or "0") + ("" if high is None else "," + high) + "}")
        self.index = found.end()
        self._possessive()

    def _escape(self, *, in_class: bool) -> str:
        if self.index >= len(self.text):
            raise _GiveUp
        char = self.text[self.index]
        self.index += 1
        if char in _KEPT_ESCAPES:
            if char in "bB" and (in_class or self._peek() == "{"):
                raise _GiveUp  # a backspace in a class; \b{start} to Rust
            if char == "A" and in_class:
                raise _GiveUp
            return "\\" + char
        if char == "Z" and not in_class:
            return "$"  # the end of the line: rg's \z is the end of its buffer, past the newline
        if char == "x":
            return "\\x" + self._hex(2)
        if char in "uU":
            return "\\x{" + self._hex(4 if char == "u" else 8) + "}"
        if char in "pP":
            return self._property(char)
        if char.isalnum() or char == "_":
            raise _GiveUp  # backreferences, octal, letters Rust lacks or reads otherwise
        return _literal(char)

    def _hex(self, count: int) -> str:
        digits = self._peek(count)
        if len(digits) != count or not set(digits) <= _HEX:
            raise _GiveUp
        self.index += count
        return digits

    def _property(self, char: str) -> str:
        if self._peek() == "{":
            end = self.text.find("}", self.index)
            if end < 0:
                raise _GiveUp
            name = self.text[self.index : end + 1]
            self.index = end + 1
            return "\\" + char + name
        name = self._peek()
        if not name.isalpha():
            raise _GiveUp
        self.index += 1
        return "\\" + char + name

    def _class(self) -> None:
        self.out.append("[")
        if self._peek() == "^":
            self.out.append("^")
            self.index += 1
        if self._peek() == "]":
            self.out.append("\\]")
            self.index += 1
        while self.index < len(self.text):
            char = self.text[self.index]
            self.index += 1
            if char == "]":
                self.out.append("]")
                return
            if char == "\\":
                self.out.append(self._escape(in_class=True))
            elif char == "[":
                self._bracket_in_class()
            elif char in "&-~" and self._peek() == char:
                raise _GiveUp  # Rust's set operations
            else:
                self.out.append(char)
        raise _GiveUp

    def _bracket_in_class(self) -> None:
        found = re.match(r":\^?[a-z]+:\]", self.text[self.index :])
        if found is None:
            self.out.append("\\[")
            return
        self.out.append("[" + found.group(0))
        self.index += found.end()

    def _group(self) -> None:
        if self._peek() != "?":
            self.out.append("(")
            return
        start = self.index - 1
        rest = self.text[self.index + 1 :]
        if rest.startswith(":"):
            self.out.append("(?:")
            self.index += 2
        elif rest.startswith("P<") or (rest.startswith("<") and rest[1:2] not in ("=", "!")):
            named = re.match(r"P?<([A-Za-z_][A-Za-z0-9_]*)>", rest)
            if named is None:
                raise _GiveUp
            self.out.append(f"(?P<{named.group(1)}>")
            self.index += 1 + named.end()
        else:
            self._flags(rest, start)

    def _flags(self, rest: str, start: int) -> None:
        found = re.match(r"([A-Za-z]*)(?:-([A-Za-z]*))?([:)])", rest)
        if found is None:
            raise _GiveUp  # lookaround, atomic, comments, conditionals, recursion
        letters = found.group(1) + (found.group(2) or "")
        if not letters or not set(letters) <= _FLAGS:
            raise _GiveUp
        if found.group(3) == ")" and start != 0:
            raise _GiveUp  # a global flag past the start: Python applies it everywhere
        self.out.append("(?" + found.group(0))
        self.index += 1 + found.end()


def _literal(char: str) -> str:
    """``char`` as a literal to Rust, whatever it is."""
    return "\\x{" + format(ord(char), "x") + "}"
