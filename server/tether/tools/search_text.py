"""``search_text``: lines of workspace files that match a regular expression.

Patterns come from the model, so they run on the ``regex`` engine with a time budget: a pattern
that backtracks without end is stopped (``re`` cannot be stopped, and holds the interpreter while
it runs), and matching releases the interpreter lock so the server keeps answering meanwhile.
"""

from __future__ import annotations

import base64
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import orjson
from pydantic import Field

from tether.protocol.tools import ToolKind
from tether.tools.base import (
    FileAccess,
    ListsOpenFiles,
    SearchEngine,
    ToolContext,
    ToolError,
    ToolResult,
)
from tether.tools.dialect import rust_pattern
from tether.tools.ignores import IgnoreFiles, ignores_above
from tether.tools.rg_search import Pass, count_files, search_pass
from tether.tools.ripgrep import RgProcess, Ripgrep, chosen, rg_walk, start_ignored
from tether.tools.sandbox import LinkedFileError, Sandbox, format_size
from tether.tools.text import BINARY_SNIFF_BYTES, clip, decode, is_binary, split_lines
from tether.tools.typed import ToolArguments, TypedTool
from tether.tools.walk import (
    IGNORED_DIRS,
    WALK_BUDGET_SECONDS,
    Glob,
    Walk,
    WalkedFile,
    run_in_thread,
    walk_files,
)

if TYPE_CHECKING:  # imported by the first search: a start that never searches skips it
    import regex as re

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_SCANNED = 200_000
MAX_SEARCH_FILE_BYTES = 1024 * 1024
MAX_OUTPUT_BYTES = 256 * 1024
MAX_LINE_CHARS = 300
TIME_BUDGET_SECONDS = 10.0  # for all the matching of one search


class SearchTextArguments(ToolArguments):
    pattern: str = Field(
        min_length=1, description="Python regular expression, matched against each line"
    )
    path: str = Field(
        default=".",
        description="file or directory to search, relative to the workspace root (default: it)",
    )
    glob: str | None = Field(
        default=None,
        description="only files matching this glob relative to path, e.g. '**/*.py' or '*.md'",
    )
    limit: int = Field(
        default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="most matching lines to return"
    )
    ignore_case: bool = Field(default=False, description="match case-insensitively")
    include_ignored: bool = Field(
        default=False,
        description="also files that .gitignore or .ignore files exclude",
    )


class SearchText(TypedTool[SearchTextArguments]):
    def __init__(self) -> None:
        super().__init__(
            name="search_text",
            description=(
                "Search workspace text files for lines matching a Python regular expression; "
                "returns 'path:line: text' (skips binary files, files over 1 MiB, ignored dirs, "
                "and what .gitignore and .ignore files exclude unless include_ignored is set)."
            ),
            kind=ToolKind.SEARCH,
            arguments_model=SearchTextArguments,
        )

    async def call(self, args: SearchTextArguments, context: ToolContext) -> ToolResult:
        engine = context.search
        return await run_in_thread(
            lambda stop: _search(args, context.workspace, stop, context.files, engine)
        )


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    import regex as re

    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None


class _Search:
    def __init__(
        self,
        sandbox: Sandbox,
        regex: re.Pattern[str],
        limit: int,
        files: FileAccess | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.files = files  # an editor's buffers: their text comes first
        self.regex = regex
        self.limit = limit
        self.matches: list[str] = []
        self.size = 0
        self.full = False  # limit or output cap reached
        self.skipped = {"binary": 0, "large": 0, "unreadable": 0, "linked": 0}
        self.budget = TIME_BUDGET_SECONDS
        self.deadline = time.monotonic() + self.budget
        # what ended the matching at its deadline: one line the pattern took long on, or the
        # many files (and lines) before it
        self.timed_out: Literal["pattern", "files"] | None = None
        self.searched = 0  # files whose every line was matched
        # whether a file with hard links outside the workspace is counted as skipped: not when
        # only matching files are looked at (the count would tell whether such a file matches)
        self.count_linked = True

    def search(self, files: list[WalkedFile], stop: threading.Event) -> None:
        """Search ``files`` in order, until the limit, the deadline or ``stop``."""
        for file in files:
            if stop.is_set() or self.full:
                return
            if time.monotonic() > self.deadline:
                self.timed_out, self.full = "files", True
                return
            self.file(file)
            if self.timed_out is None:
                self.searched += 1

    def file(self, file: WalkedFile) -> None:
        current = self.files.read_text(Path(file.path)) if self.files is not None else None
        if current is not None:
            self.lines(file, split_lines(current))
            return
        if file.size > MAX_SEARCH_FILE_BYTES:
            self.skipped["large"] += 1
            return
        try:
            data = self.sandbox.read_bytes(file.path, max_bytes=MAX_SEARCH_FILE_BYTES)
        except LinkedFileError:
            if self.count_linked:
                self.skipped["linked"] += 1
            return
        except ToolError:
            self.skipped["unreadable"] += 1
            return
        if is_binary(data):
            self.skipped["binary"] += 1
            return
        self.lines(file, split_lines(decode(data)[0]))

    def lines(self, file: WalkedFile, lines: list[str]) -> None:
        for number, line in enumerate(lines, 1):
            left = max(0.0, self.deadline - time.monotonic())
            try:
                found = self.regex.search(line, timeout=left, concurrent=True)
            except TimeoutError:
                # a tenth of the budget on one line: the pattern backtracks
                self.timed_out = "pattern" if left > self.budget / 10 else "files"
                self.full = True
                return
            if found is not None and not self.add(file, number, line):
                return

    def add(self, file: WalkedFile, number: int, line: str) -> bool:
        """Keep a matching line; False (and full) when the limit or the output cap is reached."""
        match = f"{file.rel}:{number}: {clip(line, MAX_LINE_CHARS)}"
        self.size += len(match.encode()) + 1
        if len(self.matches) >= self.limit or self.size > MAX_OUTPUT_BYTES:
            self.full = True
            return False
        self.matches.append(match)
        return True

    def notes(self, found: int) -> list[str]:
        """What the model should know of the search: why it stopped early, what it skipped.
        ``found``: the files there were to search."""
        notes: list[str] = []
        searched = f"{self.searched} of {found} files searched"
        if self.timed_out == "pattern":
            notes.append(
                f"[stopped after {self.budget:g} s of matching ({searched}): the pattern "
                "backtracks too much on a line; simplify it or narrow with path and glob]"
            )
        elif self.timed_out == "files":
            notes.append(
                f"[stopped after {self.budget:g} s of matching ({searched}), so some files were "
                "not searched: narrow with path and glob]"
            )
        elif self.full:
            notes.append(
                f"[stopped at {len(self.matches)} matches, there may be more: narrow with path, "
                f"glob or pattern, or raise limit (at most {MAX_LIMIT})]"
            )
        counts = self.skipped
        kinds = {
            f"{counts['binary']} binary": counts["binary"],
            f"{counts['large']} over {format_size(MAX_SEARCH_FILE_BYTES)}": counts["large"],
            f"{counts['unreadable']} unreadable": counts["unreadable"],
            f"{counts['linked']} with hard links outside the workspace": counts["linked"],
        }
        kept = [text for text, count in kinds.items() if count]
        if kept:
            notes.append(f"[skipped files: {', '.join(kept)}]")
        return notes


def _no_matches(search: _Search, found: int, walk: Walk | None) -> str:
    """The answer without a match: in how many files, which is all of them only when neither
    the walk nor the matching stopped early (the notes say why they did)."""
    if search.timed_out is None and (walk is None or walk.complete):
        return f"no matches in {found} files"
    return f"no matches in the {search.searched} files searched (the search stopped early)"


def _walked(sandbox: Sandbox, target: Path, shown: str) -> WalkedFile:
    try:
        info = os.stat(target)
    except OSError as exc:
        raise ToolError(f"cannot search {shown}: {exc.strerror or exc}") from None
    return WalkedFile.of(sandbox.relative(target), str(target), info)


def _search(
    args: SearchTextArguments,
    workspace: Path,
    stop: threading.Event,
    access: FileAccess | None = None,
    engine: SearchEngine = "auto",
) -> ToolResult:
    sandbox = Sandbox(workspace)
    sandbox.links.stop = stop
    regex = _compile(args.pattern, args.ignore_case)
    glob = Glob.compile(args.glob) if args.glob is not None else None
    target = sandbox.resolve(args.path)
    # one file is searched by Python: rg would open a FIFO or device named explicitly
    rg = chosen(engine, sandbox.root, target) if target.is_dir() else None
    translated = rust_pattern(args.pattern) if rg is not None else None
    if translated is None:  # no rg, or a pattern only Python reads right
        rg = None
    if target.is_dir() and rg is not None and translated is not None and glob is None:
        answer = _one_pass(rg, translated, args, sandbox, target, regex, stop, access)
        if answer is not None:
            return answer
    walk: Walk | None = None
    if target.is_dir():
        walk = _walk(rg, sandbox.root, target, glob, stop, args.include_ignored)
        files = walk.files
    else:
        files = [_walked(sandbox, target, args.path)]
    # one walk of the workspace for the hard links of every file that has several
    sandbox.links.count(
        {
            file.key: file.links
            for file in files
            if file.links > 1 and file.size <= MAX_SEARCH_FILE_BYTES
        }
    )
    search = _Search(sandbox, regex, args.limit, access)
    if (
        rg is None
        or translated is None
        or not _rg_search(rg, translated, args, search, files, stop)
    ):
        search = _Search(sandbox, regex, args.limit, access)
        search.search(files, stop)
    lines = search.matches or [_no_matches(search, len(files), walk)]
    lines += search.notes(len(files))
    if walk is not None:
        lines += walk.notes(
            max_entries=MAX_SCANNED,
            budget=WALK_BUDGET_SECONDS,
            what="some files were not searched",
        )
    return ToolResult("\n".join(lines))


def _walk(
    rg: Ripgrep | None,
    root: Path,
    target: Path,
    glob: Glob | None,
    stop: threading.Event,
    include_ignored: bool,
) -> Walk:
    if rg is None:
        return walk_files(
            root,
            target,
            glob=glob,
            max_entries=MAX_SCANNED,
            stop=stop,
            include_ignored=include_ignored,
        )
    return rg_walk(
        rg,
        root,
        target,
        glob=glob,
        max_entries=MAX_SCANNED,
        stop=stop,
        include_ignored=include_ignored,
        budget=WALK_BUDGET_SECONDS,
        stat=True,
    )


def _pattern_options(pattern: str, args: SearchTextArguments) -> list[str]:
    """The options of every ``rg`` that matches ``pattern`` (Rust syntax) for ``args``."""
    options = ["--crlf", "--max-count", str(args.limit + 1), "--regexp", pattern]
    if args.ignore_case:
        options.append("--ignore-case")
    return options


def _one_pass(
    rg: Ripgrep,
    pattern: str,
    args: SearchTextArguments,
    sandbox: Sandbox,
    target: Path,
    regex: re.Pattern[str],
    stop: threading.Event,
    access: FileAccess | None,
) -> ToolResult | None:
    """The search of the directory ``target`` by one ``rg`` that walks and counts the
    matching lines of each file (:mod:`tether.tools.rg_search`), then judged here file by
    file in path order as the Python engine judges the files it reads, reading the lines of
    just enough matching files; None when this cannot answer as that engine would (an
    editor's buffers it cannot list, an ignored start, an ignore file no walk may read, a
    pattern rg refuses, more files than a walk scans): the caller walks, then searches."""
    root = sandbox.root
    if access is not None and not isinstance(access, ListsOpenFiles):
        return None
    if not args.include_ignored and start_ignored(root, target, Walk()):
        return None
    search = _Search(sandbox, regex, args.limit, access)
    search.count_linked = False
    found = search_pass(
        rg,
        target,
        _pattern_options(pattern, args),
        include_ignored=args.include_ignored,
        parents=target != root,
        max_bytes=MAX_SEARCH_FILE_BYTES,
        stop=stop,
        deadline=search.deadline,
    )
    count = found.files(target)
    if found.stopped in ("unsafe", "refused") or (count or 0) > MAX_SCANNED:
        return None  # the Python walk leaves out that ignore file, or stops at the cap
    walk = Walk()
    if found.stopped == "time":
        search.timed_out, search.full = "files", True
    if count is None and not stop.is_set():  # rg did not end: count (cancelled: no one reads)
        count = count_files(
            rg,
            target,
            include_ignored=args.include_ignored,
            parents=target != root,
            stop=stop,
            budget=WALK_BUDGET_SECONDS,
        )
        walk.stopped = None if count is not None else "time"
    opened = _open_files(access, root, target, args.include_ignored)
    prefix = "" if target == root else target.relative_to(root).as_posix() + "/"
    lines = _Lines(rg, pattern, args, search, found, stop)
    _judge(search, found, lines, target, prefix, sorted({*found.paths(), *opened}), stop)
    total = count if count is not None else len(found.paths())
    answer = search.matches or [_no_matches(search, total, walk)]
    answer += search.notes(total)
    answer += walk.notes(
        max_entries=MAX_SCANNED, budget=WALK_BUDGET_SECONDS, what="some files were not searched"
    )
    return ToolResult("\n".join(answer))


class _Lines:
    """The matching lines of the files the first pass counted some in, read by ``rg --json``
    over a batch of them at a time: from the file asked about on, in path order, as many as
    the matches still wanted need."""

    def __init__(
        self,
        rg: Ripgrep,
        pattern: str,
        args: SearchTextArguments,
        search: _Search,
        found: Pass,
        stop: threading.Event,
    ) -> None:
        self._rg, self._search, self._found, self._stop = rg, search, found, stop
        self._options = ["--json", "--no-config", "--no-ignore", "--hidden"]
        self._options += _pattern_options(pattern, args)
        self._read: dict[str, _Found] = {}

    def of(
        self, file: WalkedFile, rel: str, ahead: Iterator[tuple[str, WalkedFile]]
    ) -> _Found | None:
        """What ``rg`` finds in ``file`` (``rel`` to the start); ``ahead``: the matching files
        after it in path order, read in the same batch while matches are still wanted. None
        when ``rg`` refuses the pattern."""
        if rel not in self._read:
            wanted = self._search.limit + 1 - len(self._search.matches)
            batch = [(rel, file)]
            used = self._found.counts[rel]
            for other in ahead:
                if used >= wanted or len(batch) >= FIRST_CHUNK:
                    break
                batch.append(other)
                used += self._found.counts[other[0]]
            files = [member for _, member in batch]
            result = _rg_chunk(self._rg, self._options, self._search, files, self._stop)
            if result is None:
                return None
            self._read.update((name, result) for name, _ in batch)
        return self._read[rel]


def _open_files(
    access: FileAccess | None, root: Path, target: Path, include_ignored: bool
) -> set[str]:
    """The files an editor holds that the walk of ``target`` lists (relative to it)."""
    if not isinstance(access, ListsOpenFiles):
        return set()
    listed = (_listed(root, target, Path(path), include_ignored) for path in access.open_paths())
    return {rel for rel in listed if rel is not None}


def _listed(root: Path, start: Path, path: Path, include_ignored: bool) -> str | None:
    """``path`` relative to ``start`` when the walk from ``start`` lists it (a regular file
    reached through no symlink nor skipped directory, and, unless ``include_ignored``, one
    no ignore rule leaves out), as :func:`tether.tools.walk.walk_files` decides; else None."""
    try:
        parts = path.relative_to(start).parts
    except ValueError:
        return None
    if not parts:
        return None
    current = start
    for depth, part in enumerate(parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None
        if depth == len(parts) - 1:
            if not stat.S_ISREG(mode):
                return None
        elif not stat.S_ISDIR(mode) or part in IGNORED_DIRS:
            return None
    if not include_ignored:
        rules = ignores_above(root, path, IgnoreFiles())
        from_root = path.relative_to(root).parts
        first = len(from_root) - len(parts)
        for depth in range(first, len(from_root)):
            is_dir = depth < len(from_root) - 1
            if rules.ignored("/".join(from_root[: depth + 1]), is_dir=is_dir):
                return None
    return "/".join(parts)


def _judge(
    search: _Search,
    found: Pass,
    lines: _Lines,
    target: Path,
    prefix: str,
    paths: list[str],
    stop: threading.Event,
) -> None:
    """Add what the first pass found to ``search``, for ``paths`` (relative to ``target``,
    sorted), as the Python engine judges each file it reads, until the limit: an editor's
    buffer first, then the size cap, the hard links (a file linked outside shows nothing, and
    is not counted), whether it could be read, a NUL within the sniff; a NUL past the sniff:
    the file is read as Python reads it. A file gone or no longer regular is left out, as a
    walk leaves out what vanishes under it."""
    directory = os.fspath(target)
    matching = [rel for rel in paths if rel in found.counts]
    place = {rel: index for index, rel in enumerate(matching)}
    links_counted = False
    for index, rel in enumerate(paths):
        if stop.is_set() or search.full:
            return
        file = _walked_file(directory, prefix, rel)
        if file is None:
            continue
        if file.links > 1 and file.size <= MAX_SEARCH_FILE_BYTES and not links_counted:
            _count_links(search.sandbox, directory, prefix, paths[index:])
            links_counted = True
        opened = search.files is not None and search.files.read_text(Path(file.path)) is not None
        if opened or rel in found.large or rel in found.unreadable:
            search.file(file)  # the buffer, or the skip the Python engine counts
        elif search.sandbox.links.found(file.key, file.links) < file.links:
            pass  # linked outside the workspace: nothing of it is shown
        elif (offset := found.binary.get(rel)) is not None:
            if offset < BINARY_SNIFF_BYTES:
                search.skipped["binary"] += 1
            else:
                search.file(file)
        else:
            ahead = (
                (name, other)
                for name in matching[place[rel] + 1 :]
                if (other := _walked_file(directory, prefix, name)) is not None
            )
            read = lines.of(file, rel, ahead)
            if read is None:  # rg refuses the pattern: Python reads the file
                search.file(file)
            else:
                _take_file(search, file, read)
        if search.timed_out is None:
            search.searched += 1


def _walked_file(directory: str, prefix: str, rel: str) -> WalkedFile | None:
    path = f"{directory}/{rel}"
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return WalkedFile.of(prefix + rel, path, info) if stat.S_ISREG(info.st_mode) else None


def _count_links(sandbox: Sandbox, directory: str, prefix: str, paths: list[str]) -> None:
    """Count, in one walk of the workspace, the hard links of every file of ``paths`` that
    has several (the first such file met counts them for the rest)."""
    files = (_walked_file(directory, prefix, rel) for rel in paths)
    sandbox.links.count(
        {
            file.key: file.links
            for file in files
            if file is not None and file.links > 1 and file.size <= MAX_SEARCH_FILE_BYTES
        }
    )


FIRST_CHUNK = 2048  # files in the first rg run; each later one takes twice as many
MAX_CHUNK_ARG_BYTES = 512 * 1024  # of paths on one rg command line


def _rg_search(
    rg: Ripgrep,
    pattern: str,
    args: SearchTextArguments,
    search: _Search,
    files: list[WalkedFile],
    stop: threading.Event,
) -> bool:
    """Search ``files`` in path order with ``rg``, into ``search``, in runs over growing
    chunks of them until the limit is passed; False when ``rg`` refuses the pattern (the
    caller searches with Python then)."""
    options = ["--json", "--no-config", "--no-ignore", "--hidden"]
    options += _pattern_options(pattern, args)
    start, size = 0, FIRST_CHUNK
    while start < len(files) and not (search.full or stop.is_set()):
        if time.monotonic() > search.deadline:
            search.timed_out, search.full = "files", True
            return True
        chunk = _chunk(files, start, size)
        found = _rg_chunk(rg, options, search, chunk, stop)
        if found is None:
            return False
        _take(search, chunk, found)
        start += len(chunk)
        size *= 2
    return True


def _chunk(files: list[WalkedFile], start: int, size: int) -> list[WalkedFile]:
    chunk: list[WalkedFile] = []
    used = 0
    for file in files[start : start + size]:
        used += len(file.rel) + 3
        if chunk and used > MAX_CHUNK_ARG_BYTES:
            break
        chunk.append(file)
    return chunk


@dataclass
class _Found:
    """What one rg run found: matching lines by path, where each binary file's NUL is, how many
    files it could not read, and whether the deadline stopped it."""

    lines: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    binary: dict[str, int] = field(default_factory=dict)
    unreadable: int = 0
    timed_out: bool = False
    read: set[str] = field(default_factory=set)  # the files given to rg (by rel)


def _rg_chunk(
    rg: Ripgrep, options: list[str], search: _Search, chunk: list[WalkedFile], stop: threading.Event
) -> _Found | None:
    """``rg`` over the files of ``chunk`` that it is to read (the others are judged by
    :func:`_take`); None when it refuses the pattern."""
    found = _Found()
    found.read = {file.rel for file in chunk if _for_rg(search, file)}
    paths = ["./" + rel for rel in sorted(found.read)]
    if not paths:
        return found
    run = RgProcess(
        rg, [*options, "--", *paths], cwd=search.sandbox.root, stop=stop, deadline=search.deadline
    )
    try:
        for line in run.stdout:
            _parse(line, found)
    finally:
        status, error = run.close()
    found.timed_out = run.killed == "time"
    if status == 2 and "regex" in error.lower() and not found.lines:
        return None
    found.unreadable = error.count("(os error")
    return found


def _for_rg(search: _Search, file: WalkedFile) -> bool:
    """Whether ``rg`` reads ``file``: not one an editor holds, too large or linked outside."""
    if search.files is not None and search.files.read_text(Path(file.path)) is not None:
        return False
    if file.size > MAX_SEARCH_FILE_BYTES:
        return False
    return search.sandbox.links.found(file.key, file.links) >= file.links


def _parse(line: bytes, found: _Found) -> None:
    if line.startswith(b'{"type":"match"'):
        data = orjson.loads(line)["data"]
        path = _text(data["path"])
        text = _text(data["lines"]).removesuffix("\n").removesuffix("\r")
        found.lines.setdefault(path, []).append((data["line_number"], text))
    elif line.startswith(b'{"type":"end"'):
        data = orjson.loads(line)["data"]
        if data.get("binary_offset") is not None:
            found.binary[_text(data["path"])] = data["binary_offset"]


def _text(value: dict[str, str]) -> str:
    """A path or line of rg's JSON: text, or base64 bytes where it is no valid UTF-8."""
    if "text" in value:
        return value["text"]
    return base64.b64decode(value["bytes"]).decode("utf-8", errors="replace")


def _take_file(search: _Search, file: WalkedFile, found: _Found) -> None:
    """Add what ``rg`` found in ``file`` (read in a batch of the first pass's matching files)
    to ``search``. A NUL within the sniff: binary; past it, a skip, or no line where the first
    pass counted some (the file changed meanwhile, or could not be read): as Python does it."""
    key = "./" + file.rel
    offset = found.binary.get(key)
    if offset is not None and offset < BINARY_SNIFF_BYTES:
        search.skipped["binary"] += 1
    elif found.timed_out and key not in found.lines:
        search.timed_out, search.full = "files", True
    elif offset is not None or file.rel not in found.read or key not in found.lines:
        search.file(file)
    else:
        for number, text in found.lines[key]:
            if not search.add(file, number, text):
                return


def _take(search: _Search, chunk: list[WalkedFile], found: _Found) -> None:
    """Add what ``rg`` found in ``chunk`` to ``search`` in path order, and judge the files it
    did not read as the Python engine does."""
    search.skipped["unreadable"] += found.unreadable
    for file in chunk:
        if search.full:
            return
        key = "./" + file.rel
        offset = found.binary.get(key)
        if offset is not None and offset < BINARY_SNIFF_BYTES:
            search.skipped["binary"] += 1
        elif offset is not None or file.rel not in found.read:
            search.file(file)  # a buffer, a skip, or NUL past the sniff: as Python does it
        else:
            for number, text in found.lines.get(key, ()):
                if not search.add(file, number, text):
                    return
        if found.timed_out and key not in found.lines:
            search.timed_out, search.full = "files", True
            return
        search.searched += 1
