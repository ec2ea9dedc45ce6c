"""Agent profiles: named system prompts with the tools, model and iterations they run with.

A profile is a Markdown file ``<config>/tether/agents/NAME.md`` (the user's) or
``<workspace>/.tether/agents/NAME.md`` (a repository's). Its optional front matter
(:mod:`tether.kernel.frontmatter`) gives ``description``, ``tools`` (an allow-list),
``model`` and ``maxIterations``; its body is the system prompt. A session runs under one
(``Session.agent``), and so does a sub-agent the ``task`` tool starts (:mod:`.subagents`).

A profile only ever narrows: its ``tools`` intersect the session's and the run's, its ``model``
is checked against the session's ``allowedModels`` like any other (:mod:`.access`). A
repository's profile is untrusted input besides: it is read through
:func:`tether.repofiles.read_repo_file` (a regular file inside the workspace, at most
:data:`MAX_PROFILE_BYTES`), and its ``maxIterations`` cannot exceed ``kernel.max_iterations``.
When the user and the workspace both have a profile of a name, the user's is the one used.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.config import user_config_path
from tether.kernel.frontmatter import (
    FrontMatterError,
    int_field,
    list_field,
    parse_document,
    string_field,
)
from tether.protocol import InvalidParams
from tether.repofiles import RepoFileError, read_repo_file

MAX_PROFILE_BYTES = 64 * 1024
MAX_PROFILES = 200  # listed per directory
AGENTS_DIR = "agents"
ProfileSource = Literal["user", "workspace"]


@dataclass(frozen=True)
class AgentProfile:
    name: str
    prompt: str
    source: ProfileSource
    path: Path
    description: str | None = None
    tools: tuple[str, ...] | None = None  # None: every tool the session has
    model: str | None = None
    max_iterations: int | None = None

    def narrow(self, names: list[str] | None) -> list[str] | None:
        """An allow-list of tool names narrowed by this profile's (None: no list at all)."""
        if self.tools is None:
            return names
        if names is None:
            return list(self.tools)
        return [name for name in names if name in self.tools]


class ProfileError(Exception):
    """A profile file that cannot be used; the message names it and says why."""


def user_agents_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``<config>/tether/agents`` (None when there is no user configuration directory)."""
    config = user_config_path(environ)
    return None if config is None else config.parent / AGENTS_DIR


def workspace_agents_dir(workspace: Path) -> Path:
    return workspace / ".tether" / AGENTS_DIR


def find_profile(
    name: str, workspace: Path | None, environ: Mapping[str, str] = os.environ
) -> AgentProfile | None:
    """The profile ``name`` (the user's first, then the workspace's); None when neither has
    it. :class:`ProfileError` when the file found cannot be used. Reads files: call it off the
    event loop where that matters."""
    if not _valid_name(name):
        return None
    user = user_agents_dir(environ)
    if user is not None:
        profile = _read_profile(user / f"{name}.md", name, "user", None)
        if profile is not None:
            return profile
    if workspace is not None:
        root = Path(os.path.realpath(workspace))
        return _read_profile(workspace_agents_dir(root) / f"{name}.md", name, "workspace", root)
    return None


def list_profiles(
    workspace: Path | None, environ: Mapping[str, str] = os.environ
) -> list[AgentProfile]:
    """Every usable profile, by name (a file that cannot be used is left out)."""
    found: dict[str, AgentProfile] = {}
    user = user_agents_dir(environ)
    for directory in (user, None if workspace is None else workspace_agents_dir(workspace)):
        for name in _names_in(directory):
            if name in found:
                continue
            try:
                profile = find_profile(name, workspace, environ)
            except ProfileError:
                continue
            if profile is not None:
                found[name] = profile
    return [found[name] for name in sorted(found)]


def require_profile(
    name: str, workspace: Path | None, environ: Mapping[str, str] = os.environ
) -> AgentProfile:
    """:func:`find_profile`, or ``-32602`` InvalidParams naming the agent (field ``agent``)."""
    try:
        profile = find_profile(name, workspace, environ)
    except ProfileError as exc:
        raise unknown_agent(name, str(exc)) from None
    if profile is None:
        known = ", ".join(p.name for p in list_profiles(workspace, environ)) or "none"
        raise unknown_agent(name, f"no agent profile {name!r} (known: {known})")
    return profile


def unknown_agent(name: str, message: str) -> InvalidParams:
    return InvalidParams(
        f"agent: {message}",
        {"fields": [{"field": "agent", "message": message}], "agent": name},
    )


def _valid_name(name: str) -> bool:
    return (
        0 < len(name) <= 64
        and name[0].isalnum()
        and all(c.isalnum() or c in "._-" for c in name)
        and name.isascii()
    )


def _names_in(directory: Path | None) -> list[str]:
    if directory is None:
        return []
    try:
        entries = sorted(os.listdir(directory))[: MAX_PROFILES * 4]
    except OSError:
        return []
    names = [entry[:-3] for entry in entries if entry.endswith(".md")]
    return [name for name in names if _valid_name(name)][:MAX_PROFILES]


def _read_profile(
    path: Path, name: str, source: ProfileSource, inside: Path | None
) -> AgentProfile | None:
    try:
        data = read_repo_file(path, max_bytes=MAX_PROFILE_BYTES, inside=inside)
    except RepoFileError as exc:
        raise ProfileError(f"agent profile {path} cannot be read: {exc.detail}") from None
    if data is None:
        return None
    try:
        document = parse_document(data.decode("utf-8"))
        fields = document.fields
        tools = list_field(fields, "tools")
        return AgentProfile(
            name=name,
            prompt=document.body.strip(),
            source=source,
            path=path,
            description=string_field(fields, "description"),
            tools=None if tools is None else tuple(tools),
            model=string_field(fields, "model"),
            max_iterations=int_field(fields, "maxIterations", 1, 1000),
        )
    except UnicodeDecodeError:
        raise ProfileError(f"agent profile {path} is not UTF-8 text") from None
    except FrontMatterError as exc:
        raise ProfileError(f"agent profile {path}: {exc}") from None


class Profiles:
    """The profiles seen from one environment (where the user's configuration directory is)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = environ

    def find(self, name: str, workspace: Path | None) -> AgentProfile | None:
        return find_profile(name, workspace, self._environ)

    def require(self, name: str, workspace: Path | None) -> AgentProfile:
        return require_profile(name, workspace, self._environ)

    async def listed(self, workspace: Path | None) -> list[AgentProfile]:
        """:meth:`list`, read on a thread when there may be any profile."""
        if self.surely_none(workspace):
            return []
        return await asyncio.to_thread(self.list, workspace)

    def list(self, workspace: Path | None) -> list[AgentProfile]:
        return list_profiles(workspace, self._environ)

    def surely_none(self, workspace: Path | None) -> bool:
        """Whether there is surely no profile (neither directory exists): asked on the event
        loop (two ``stat`` calls), it spares most runs a hop to a thread to list them."""
        user = user_agents_dir(self._environ)
        folders = [user, None if workspace is None else workspace_agents_dir(workspace)]
        return not any(folder is not None and folder.is_dir() for folder in folders)
