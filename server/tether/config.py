"""tether's configuration: pydantic models with defaults, and the layers they are loaded from.

Layers, later wins: built-in defaults < user file (``$XDG_CONFIG_HOME/tether/config.toml``) <
workspace file (``.tether/config.toml``) < environment < ``initializationOptions`` <
``session/create`` fields < ``kernel/run`` params. :func:`load_config` merges the first five;
the later ones go on top with :meth:`TetherConfig.overlay`.

Merging is per section and key by key: a later layer that sets ``provider.model`` keeps the
``provider.base_url`` of an earlier one. Values (lists included) are replaced whole. A ``None``
value counts as absent. Keys are snake_case in TOML; camelCase is accepted as well (in JSON
layers it is the usual spelling).

Every layer is validated as it is applied, so an invalid one is reported as
:class:`tether.protocol.ConfigError` naming that layer (``source``) and the dotted key (``key``).
The workspace file is a repository's, not the user's: it may not set the keys of
:data:`WORKSPACE_REFUSED` nor loosen the user's own settings, it is read only as a small regular
file inside the workspace with bounded nesting (:func:`_read_toml`), and a server leaves out a
workspace file that fails (``on_workspace_error``) rather than refuse to start. Each workspace
folder has its own (the caller loads the configuration of each).
Values are echoed in messages only when they are scalars under keys whose names cannot hold a
credential. API keys are never part of the configuration: ``provider.api_key_env`` names the
environment variable the provider reads.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from tether.paths import user_config_path as user_config_path
from tether.protocol import ConfigError
from tether.protocol.limits import DEFAULT_LIMITS, Limits
from tether.protocol.tools import McpServerSpec, unique_server_names
from tether.repofiles import RepoFileError, read_repo_file

ENV_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "TETHER_PROVIDER": "provider.type",
        "TETHER_MODEL": "provider.model",
        "TETHER_BASE_URL": "provider.base_url",
        "TETHER_MAX_ITERATIONS": "kernel.max_iterations",
        "TETHER_APPROVAL": "tools.approval",
        "TETHER_SANDBOX": "tools.sandbox",
        "TETHER_SANDBOX_NETWORK": "tools.sandbox_network",
        "TETHER_MAX_FRAME_BYTES": "limits.max_frame_bytes",
        "TETHER_TELEMETRY": "telemetry.enabled",
    }
)
"""Short names of a few keys, read besides their :func:`env_var` names (which win when both are
set): the variables tether read before every key had one."""

INIT_OPTIONS_SOURCE: Final = "initializationOptions"
SETTINGS_SOURCE: Final = "workspace/didChangeConfiguration"
"""The client's layer as ``workspace/didChangeConfiguration`` replaces it on a running server."""

RESTART_SECTIONS: Final = ("sessions", "limits", "log", "checkpoints")
"""The sections a running server keeps as it started with (its store and the sweep of it, the
wire's limits, the log, the checkpoint store): a change of the client's layer to them waits for
a restart (:func:`held_for_restart`)."""

_SECRET_WORDS: Final = ("key", "token", "secret")
_MAX_ECHO: Final = 80


class _Section(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        defer_build=True,
    )


ProviderType = Literal["openai", "anthropic", "gemini", "scripted"]
SandboxMode = Literal["workspace-write", "read-only", "off"]
PROVIDER_TYPES: tuple[str, ...] = get_args(ProviderType)


class ProviderConfig(_Section):
    type: ProviderType | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = Field(
        default=None, description="name of the environment variable that holds the API key"
    )
    timeout: float = Field(default=60.0, gt=0, description="seconds per HTTP request")
    max_retries: int = Field(default=3, ge=0, le=10)
    max_connections: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="connections to model endpoints open at once, shared by every run",
    )
    script: str | None = Field(default=None, description="scripted provider: path of the script")
    function: str | None = Field(
        default=None,
        description='scripted provider: the Python function that decides each turn ("module:name")',
    )
    supports_tools: bool | None = Field(
        default=None, description="whether the model takes tools; unset: as its provider declares"
    )
    supports_system: bool | None = Field(
        default=None,
        description="whether the model takes a system prompt; unset: as its provider declares",
    )


class KernelConfig(_Section):
    max_iterations: int = Field(default=10, ge=1, le=1000)
    system_prompt: str | None = None
    max_subagents: int = Field(
        default=4, ge=0, le=64, description="`task` sub-agents a run runs at once (0: no `task`)"
    )


MIN_CONTEXT_TOKENS = 1024


class LimitsConfig(_Section):
    """Sizes a client's requests may reach (see :mod:`tether.protocol.limits`)."""

    max_frame_bytes: int = Field(
        default=DEFAULT_LIMITS.max_frame_bytes,
        ge=64 * 1024,
        le=1 << 40,
        description="the most one frame's body may weigh",
    )
    max_append_messages: int = Field(
        default=DEFAULT_LIMITS.max_append_messages,
        ge=1,
        description="messages in one session/append",
    )
    max_message_bytes: int = Field(
        default=DEFAULT_LIMITS.max_message_bytes,
        ge=1024,
        description="the content of one appended message, in UTF-8 bytes",
    )

    def limits(self) -> Limits:
        return Limits(
            max_frame_bytes=self.max_frame_bytes,
            max_append_messages=self.max_append_messages,
            max_message_bytes=self.max_message_bytes,
        )


class ContextConfig(_Section):
    max_tokens: int | None = Field(
        default=None,
        ge=MIN_CONTEXT_TOKENS,
        description="estimated tokens a model request may hold; None: the whole history",
    )
    compaction: Literal["summarize", "drop"] = Field(
        default="summarize",
        description="over max_tokens: the model summarizes the oldest turns, or they are dropped",
    )


class McpServerConfig(McpServerSpec):
    """An MCP server of ``tools.mcp_servers``: the wire model, with unknown keys refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class ToolsConfig(_Section):
    enabled: list[str] | None = Field(default=None, description="None: every tool")
    approval: Literal["ask", "auto", "deny"] = "ask"
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    sandbox: SandboxMode = Field(
        default="workspace-write", description="the OS sandbox of run_command (Landlock)"
    )
    sandbox_network: bool = Field(
        default=False,
        description="whether sandboxed commands may use the network (TCP, UDP, unix sockets)",
    )
    sandbox_readable: list[str] = Field(
        default_factory=list, description="more paths sandboxed commands may read"
    )
    sandbox_writable: list[str] = Field(
        default_factory=list, description="more paths sandboxed commands may write"
    )
    mcp_sandbox: SandboxMode = Field(
        default="off", description="the OS sandbox of MCP servers tether starts (network allowed)"
    )
    search: Literal["auto", "ripgrep", "python"] = Field(
        default="auto",
        description="the engine of search_text and list_files: rg where it runs, rg, or Python",
    )

    _unique_servers = field_validator("mcp_servers")(unique_server_names)


class MemoryConfig(_Section):
    paths: list[str] = Field(default_factory=lambda: [".tether/memory"])


class InstructionsConfig(_Section):
    """Project instructions: the ``AGENTS.md`` files (or the names in ``files``) of the user's
    configuration directory and of the workspace, put in every run's system prompt."""

    enabled: bool = Field(default=True, description="false: no instruction file is read")
    files: list[str] = Field(
        default_factory=lambda: ["AGENTS.md"],
        description='the file names looked for, in order (e.g. "CLAUDE.md", "GEMINI.md")',
    )

    @field_validator("files")
    @classmethod
    def _plain_names(cls, files: list[str]) -> list[str]:
        for name in files:
            if not name.strip() or name in (".", "..") or any(c in name for c in "/\\\x00"):
                raise ValueError(f"{name!r} is not a file name (no folder, no path)")
        return files


_TTL = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_TTL_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class SessionsConfig(_Section):
    store: str = Field(
        default="memory",
        description='"memory", "sqlite" (a file at `path`) or a SQLAlchemy URL',
    )
    path: str | None = Field(default=None, description="the SQLite file of the sqlite store")
    ttl: str | None = Field(
        default=None, description='sessions idle longer are deleted: "30d", "12h", "90m", "45s"'
    )
    lease: str = Field(
        default="10s",
        description='how long a run holds its session without renewing its lease ("10s")',
    )

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        if value not in ("memory", "sqlite") and "://" not in value:
            raise ValueError('expected "memory", "sqlite" or a database URL (sqlite:///…)')
        return value

    @field_validator("ttl")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and (not _TTL.match(value) or _ttl_seconds(value) == 0):
            raise ValueError('expected a duration such as "30d", "12h", "90m" or "45s"')
        return value

    @field_validator("lease")
    @classmethod
    def _lease_duration(cls, value: str) -> str:
        if not _TTL.match(value) or not 1 <= _ttl_seconds(value) <= 3600:
            raise ValueError('expected a duration from "1s" to "1h", such as "10s"')
        return value

    def lease_delta(self) -> timedelta:
        """``lease`` as a duration: how long a run's lease lasts between two renewals."""
        return timedelta(seconds=_ttl_seconds(self.lease))

    def ttl_delta(self) -> timedelta | None:
        """``ttl`` as a duration; None when sessions never expire."""
        return None if self.ttl is None else timedelta(seconds=_ttl_seconds(self.ttl))

    def url(self, environ: Mapping[str, str] = os.environ) -> str | None:
        """The database URL of the store; None for the memory store.

        ``sqlite`` is the file at ``path``, by default ``$XDG_DATA_HOME/tether/sessions.db``
        (else ``$HOME/.local/share/tether/sessions.db``).
        """
        if self.store == "memory":
            return None
        if self.store != "sqlite":
            return self.store
        path = Path(self.path).expanduser() if self.path is not None else None
        return f"sqlite:///{path or data_home(environ) / 'sessions.db'}"


def data_home(environ: Mapping[str, str] = os.environ) -> Path:
    """tether's data directory: ``$XDG_DATA_HOME/tether``, else ``~/.local/share/tether``."""
    xdg = environ.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "tether"
    return Path(environ.get("HOME") or Path.home()) / ".local" / "share" / "tether"


def _ttl_seconds(value: str) -> int:
    match = _TTL.match(value)
    assert match is not None
    return int(match.group(1)) * _TTL_UNITS[match.group(2)]


class AcpConfig(_Section):
    editor_terminal: bool = Field(
        default=False,
        description="tether acp: run_command runs in the editor's terminal (not confined by "
        "tether's sandbox) when the client offers one",
    )
    request_timeout: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="seconds the editor has to answer a fs/* or terminal/* request (a command's "
        "own run is bounded by its timeout)",
    )


class LspConfig(_Section):
    apply_edit_timeout: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="seconds the client has to answer workspace/applyEdit (and the other "
        "requests of a turn that no person answers); then the write fails",
    )


class McpConfig(_Section):
    start_timeout: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="seconds an MCP server has to start, initialize and list its tools; then "
        "the run goes on without it",
    )


HOOK_EVENTS: Final = (
    "pre_tool_use",
    "post_tool_use",
    "user_prompt_submit",
    "stop",
    "session_start",
)
"""The events a hook may run on (the keys of ``[hooks]``)."""


class HookConfig(_Section):
    """One ``[[hooks.<event>]]``: a command of the user's own, run outside the sandbox."""

    command: str = Field(min_length=1, description="run with /bin/sh -c in the session's workspace")
    matcher: str = Field(
        default="*",
        min_length=1,
        description="tool events: a glob on the tool name (`*`, `write_*`); `a|b` for either",
    )
    timeout: float = Field(
        default=60.0, gt=0, le=3600, description="seconds before the hook's processes are killed"
    )
    name: str | None = Field(
        default=None, min_length=1, description="what progress events call it (default: command)"
    )


class HooksConfig(_Section):
    """``[[hooks.<event>]]`` arrays: commands run on the events of a run (see
    :mod:`tether.kernel.hooks`). User configuration only: a workspace file may not set them."""

    pre_tool_use: list[HookConfig] = Field(default_factory=list)
    post_tool_use: list[HookConfig] = Field(default_factory=list)
    user_prompt_submit: list[HookConfig] = Field(default_factory=list)
    stop: list[HookConfig] = Field(default_factory=list)
    session_start: list[HookConfig] = Field(default_factory=list)

    def __bool__(self) -> bool:
        return any(getattr(self, event) for event in HOOK_EVENTS)


class CheckpointsConfig(_Section):
    enabled: bool = Field(
        default=True,
        description="record what each run's edits and commands change, for session/rewind",
    )
    path: str | None = Field(
        default=None,
        description="the directory of the checkpoint store (default: the data directory's "
        "`checkpoints`)",
    )
    max_file_bytes: int = Field(
        default=10 * 1024 * 1024, ge=0, description="a larger file is not tracked (reported)"
    )
    max_checkpoint_bytes: int = Field(
        default=200 * 1024 * 1024,
        ge=0,
        description="changed files beyond this total in one snapshot are not tracked (reported)",
    )

    gc_interval: float = Field(
        default=86400.0,
        ge=0,
        description="seconds between two prunings of a workspace's checkpoint store after "
        "sessions are deleted (0: at every deletion)",
    )

    def root(self, environ: Mapping[str, str]) -> Path:
        """The checkpoint store's directory."""
        if self.path is not None:
            return Path(self.path).expanduser()
        return data_home(environ) / "checkpoints"


LogLevel = Literal["debug", "info", "warning", "error"]


class LogConfig(_Section):
    """tether's own log: read once as a command starts (the user file and the environment only,
    before any workspace), so a workspace file may not set it."""

    level: LogLevel = Field(
        default="warning", description="the least severe lines logged (`--log-level` wins)"
    )
    file: str | None = Field(
        default=None,
        description="a file the log lines go to as well as stderr, rotated by size (`~` expands)",
    )
    max_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=4096,
        description="the size at which log.file is rotated (renamed .1, .2, ...)",
    )
    backups: int = Field(default=3, ge=1, le=100, description="rotated log files kept")

    @field_validator("level", mode="before")
    @classmethod
    def _lower_level(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value


OTEL_TRACE_VARIABLES: Final = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
"""The standard OpenTelemetry variables that turn tracing on when ``telemetry.enabled`` is unset."""


class TelemetryConfig(_Section):
    """OpenTelemetry traces of runs, model calls and tool calls (the ``tether[otel]`` extra; see
    :mod:`tether.telemetry`). User configuration only: a workspace file may not set it."""

    enabled: bool | None = Field(
        default=None,
        description="trace runs; unset: when the standard OTEL_* variables ask for traces "
        "(OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)",
    )
    capture_content: bool = Field(
        default=False,
        description="put prompts, answers, tool arguments and tool results in the spans "
        "(secrets redacted); off, spans carry names, models, tokens and errors only",
    )

    def tracing(self, environ: Mapping[str, str]) -> bool:
        """Whether runs are traced: as ``enabled`` says, else as the ``OTEL_*`` variables do
        (``OTEL_SDK_DISABLED=true`` and ``OTEL_TRACES_EXPORTER=none`` say no)."""
        if self.enabled is not None:
            return self.enabled
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        if exporter == "none":
            return False
        return any(environ.get(name, "").strip() for name in OTEL_TRACE_VARIABLES)


def _empty_table() -> Any:
    """A section's default: validated into the section (``validate_default``)."""
    return {}


class TetherConfig(_Section):
    # Each section defaults to an empty table validated by this model (``validate_default``),
    # not to an instance made by its own class: that would build a validator per section class
    # (28 of them) besides this model's at the first load, in every server's handshake.
    provider: ProviderConfig = Field(default_factory=_empty_table)
    kernel: KernelConfig = Field(default_factory=_empty_table)
    tools: ToolsConfig = Field(default_factory=_empty_table)
    memory: MemoryConfig = Field(default_factory=_empty_table)
    instructions: InstructionsConfig = Field(default_factory=_empty_table)
    sessions: SessionsConfig = Field(default_factory=_empty_table)
    context: ContextConfig = Field(default_factory=_empty_table)
    limits: LimitsConfig = Field(default_factory=_empty_table)
    acp: AcpConfig = Field(default_factory=_empty_table)
    lsp: LspConfig = Field(default_factory=_empty_table)
    mcp: McpConfig = Field(default_factory=_empty_table)
    hooks: HooksConfig = Field(default_factory=_empty_table)
    checkpoints: CheckpointsConfig = Field(default_factory=_empty_table)
    log: LogConfig = Field(default_factory=_empty_table)
    telemetry: TelemetryConfig = Field(default_factory=_empty_table)

    def overlay(self, layer: Mapping[str, Any] | None, *, source: str = "overlay") -> TetherConfig:
        """This config with ``layer`` merged on top (nested like the TOML), validated again.

        ``source`` names the layer in errors (e.g. ``"session/create"``, ``"kernel/run"``).
        ``self`` is never changed. Raises :class:`ConfigError` for an unknown key or an
        invalid value.
        """
        return _overlay(self, layer, source, strict=True)


# --- loading ------------------------------------------------------------------------------------


def load_config(
    *,
    workspace: Path | None,
    environ: Mapping[str, str] = os.environ,
    init_options: Mapping[str, Any] | None = None,
    on_workspace_error: Callable[[ConfigError], None] | None = None,
    init_source: str = INIT_OPTIONS_SOURCE,
) -> TetherConfig:
    """Defaults < user file < workspace file < environment < ``initializationOptions``.

    Files that do not exist are skipped. ``environ`` is read for the user file's location
    (``XDG_CONFIG_HOME``, ``HOME``) and the ``TETHER_*`` variables of :data:`ENV_VARS` (each
    key's :func:`env_var`, and the short names of :data:`ENV_ALIASES`).

    A workspace file that is invalid, or sets what a workspace file may not, is a
    :class:`ConfigError`; with ``on_workspace_error`` it is handed there instead and the file is
    left out whole (a repository's mistake does not stop the user's own configuration).
    ``init_source`` names the client's layer in errors (it may come from
    ``workspace/didChangeConfiguration``: :data:`SETTINGS_SOURCE`).
    """
    config = TetherConfig()
    user_file = user_config_path(environ)
    if user_file is not None and (layer := _read_toml(user_file)) is not None:
        config = config.overlay(layer, source=str(user_file))
    if workspace is not None:
        try:
            config = _with_workspace_file(config, workspace)
        except ConfigError as exc:
            if on_workspace_error is None:
                raise
            on_workspace_error(exc)
    for source, layer in _environment_layers(environ):
        config = _overlay(config, layer, source, strict=False)
    return config.overlay(init_options, source=init_source)


def settings_layer(settings: object) -> dict[str, Any] | None:
    """The client's layer that ``workspace/didChangeConfiguration`` carries in ``settings``: the
    table itself, or the one under its only key ``tether`` (how editors group settings by
    server). None when it carries none (null, or an empty table: eglot sends ``{}`` right after
    the handshake), so that the layer ``initializationOptions`` set stays. Anything but a table
    is a :class:`ConfigError`."""
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise _error(SETTINGS_SOURCE, None, "settings must be an object of configuration keys")
    inner = settings.get("tether")
    if len(settings) == 1 and isinstance(inner, Mapping):
        settings = inner
    return dict(settings) or None


def held_for_restart(before: TetherConfig, after: TetherConfig) -> list[str]:
    """The dotted keys of :data:`RESTART_SECTIONS` whose values differ from ``before`` to
    ``after`` (what a running server cannot take)."""
    changed = []
    for section in RESTART_SECTIONS:
        old, new = getattr(before, section), getattr(after, section)
        changed += [
            f"{section}.{name}"
            for name in type(old).model_fields
            if getattr(old, name) != getattr(new, name)
        ]
    return changed


def keep_restart_sections(
    layer: Mapping[str, Any], previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``layer`` with :data:`RESTART_SECTIONS` as ``previous`` (the layer the server started
    with) has them: what a running server takes of a new client layer."""
    kept = {key: value for key, value in layer.items() if key not in RESTART_SECTIONS}
    for section in RESTART_SECTIONS:
        if previous is not None and section in previous:
            kept[section] = previous[section]
    return kept


def _with_workspace_file(trusted: TetherConfig, workspace: Path) -> TetherConfig:
    """``trusted`` (the user's layers) with the file of ``workspace`` on top, if any: read only
    when it resolves inside the workspace (a symlink to a file of the workspace is followed)."""
    path = workspace_config_path(workspace)
    layer = _read_toml(path, inside=workspace)
    if layer is None:
        return trusted
    _refuse_untrusted(layer, str(path))
    config = trusted.overlay(layer, source=str(path))
    _refuse_loosening(trusted, config, str(path))
    return config


def workspace_config_path(workspace: Path) -> Path:
    """``<workspace>/.tether/config.toml``."""
    return workspace / ".tether" / "config.toml"


MAX_CONFIG_BYTES: Final = 256 * 1024
"""The most a configuration file may weigh (a larger one is refused without being read whole)."""
MAX_CONFIG_DEPTH: Final = 32
"""The deepest nesting of arrays, inline tables and tables a configuration file may have."""


def _read_toml(path: Path, *, inside: Path | None = None) -> dict[str, Any] | None:
    """The file's table, or None when there is no such file.

    The file is read as :func:`tether.repofiles.read_repo_file` reads a repository's files: a
    regular file (never a device, FIFO or socket), at most :data:`MAX_CONFIG_BYTES`, and with
    ``inside`` (the workspace) only when it resolves inside that directory. Anything else, and a
    file that is not UTF-8, not TOML, or nested deeper than :data:`MAX_CONFIG_DEPTH`, is a
    :class:`ConfigError` naming the file, with ``data.reason``.
    """
    try:
        raw = read_repo_file(path, max_bytes=MAX_CONFIG_BYTES, inside=inside)
    except RepoFileError as exc:
        raise _error(str(path), None, exc.detail, reason=exc.reason) from None
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(str(path), None, "not valid UTF-8", reason="not_utf8") from None
    return _parse_toml(text, str(path))


def _parse_toml(text: str, source: str) -> dict[str, Any]:
    """``text`` parsed, its nesting bounded before (the parser recurses once per level, and has
    no limit of its own) and after (dotted keys nest tables without brackets)."""
    too_deep = _error(
        source, None, f"nested deeper than {MAX_CONFIG_DEPTH} levels", reason="too_deep"
    )
    if _nesting_depth(text) > MAX_CONFIG_DEPTH:
        raise too_deep
    import tomllib  # here: a start without a configuration file does without it

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _error(source, None, f"invalid TOML: {exc}", reason="invalid_toml") from None
    except RecursionError:  # what the scan above did not see: still a refusal, never a crash
        raise too_deep from None
    if _value_depth(table) > MAX_CONFIG_DEPTH + 1:  # the document's own table is a level
        raise too_deep
    return table


@cache
def _toml_tokens() -> tuple[re.Pattern[str], dict[str, re.Pattern[str]]]:
    """A token of TOML for :func:`_nesting_depth`: a string's or a comment's opening, a bracket,
    a separator, or a word (a bare key, or a value's text); and, by opening, what follows it
    (compiled on first use: a start without a configuration file needs none of them)."""
    token = re.compile(r"""\"\"\"|'''|["'#\[\]{}.=,\n]|[^\s"'#\[\]{}.=,]+""")
    skip = {
        '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"{3,5}', re.DOTALL),  # up to 2 quotes at its end
        "'''": re.compile(r"(?:[^']|'(?!''))*'{3,5}"),
        '"': re.compile(r'(?:[^"\\\n]|\\.)*"'),
        "'": re.compile(r"[^'\n]*'"),
        "#": re.compile(r"[^\n]*"),
    }
    return token, skip


def _nesting_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings and comments, each part of a dotted
    key counting as a level too; stops once past :data:`MAX_CONFIG_DEPTH`. Linear: each token is
    looked at once, and a string that does not end stops the scan (the parser stops there too,
    before anything after it could nest)."""
    tokens, skips = _toml_tokens()
    depth = deepest = parts = 0
    dot = False
    position = 0
    while deepest <= MAX_CONFIG_DEPTH and (token := tokens.search(text, position)):
        kind, position = token.group(), token.end()
        skip = skips.get(kind)
        if skip is not None:
            rest = skip.match(text, position)
            if rest is None:
                break
            position = rest.end()
            if kind == "#":
                kind = "\n"
        if kind == ".":
            dot = True
            continue
        if kind in ("[", "{"):
            depth, parts = depth + 1, 0
        elif kind in ("]", "}"):
            depth, parts = max(depth - 1, 0), 0
        elif kind in ("=", ",", "\n"):
            parts = 0
        else:  # a key (of a dotted key, when a dot came before) or a value
            parts = parts + 1 if dot else 1
        dot = False
        deepest = max(deepest, depth + parts)
    return deepest


def _value_depth(value: object) -> int:
    """How deep tables and arrays nest in a parsed value (without recursion)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack and deepest <= MAX_CONFIG_DEPTH:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


_HOOKS_REFUSED: Final = (
    "a repository could run any command outside the sandbox, or change or remove your own hooks"
)
_LOG_REFUSED: Final = (
    "a repository could write your log anywhere; the log is set up as tether starts, before any "
    "workspace"
)
WORKSPACE_REFUSED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "provider.type": "a repository could choose which of your API keys is used",
        "provider.base_url": "a repository could send your API key to a server of its choosing",
        "provider.api_key_env": "a repository could send any of your variables as the API key",
        "provider.script": "a repository could play the model and make any tool call",
        "provider.function": "a repository could run any Python code in tether",
        "provider.max_connections": "one client serves every workspace's runs: a repository "
        "could stall your other sessions' model calls",
        "tools.mcp_servers": "a repository could run any command, or reach any server",
        "tools.sandbox": "a repository could let commands out of the sandbox",
        "tools.sandbox_network": "a repository could let commands reach the network",
        "tools.sandbox_readable": "a repository could let commands read your files",
        "tools.sandbox_writable": "a repository could let commands write your files",
        "tools.mcp_sandbox": "a repository could let MCP servers out of the sandbox",
        "sessions.store": "a repository could send your sessions elsewhere",
        "sessions.path": "a repository could send your sessions elsewhere",
        "sessions.ttl": "a repository could delete your sessions of every workspace",
        "sessions.lease": "a repository could keep your sessions locked long after a crash",
        "acp.editor_terminal": "a repository could run commands outside tether's sandbox",
        "instructions.files": "a repository could put other files of your configuration "
        "directory in the prompt",
        "hooks.pre_tool_use": _HOOKS_REFUSED,
        "hooks.post_tool_use": _HOOKS_REFUSED,
        "hooks.user_prompt_submit": _HOOKS_REFUSED,
        "hooks.stop": _HOOKS_REFUSED,
        "hooks.session_start": _HOOKS_REFUSED,
        "checkpoints.enabled": "a repository could take away the undo of what runs change",
        "checkpoints.path": "a repository could send your checkpoints elsewhere",
        "checkpoints.max_file_bytes": "a repository could keep its files out of the undo",
        "checkpoints.max_checkpoint_bytes": "a repository could keep its files out of the undo",
        "checkpoints.gc_interval": "a repository could make every deletion repack the store",
        "log.level": _LOG_REFUSED,
        "log.file": _LOG_REFUSED,
        "log.max_bytes": _LOG_REFUSED,
        "log.backups": _LOG_REFUSED,
        "telemetry.enabled": "a repository could send what your runs do to a trace collector, "
        "or keep your runs out of your traces",
        "telemetry.capture_content": "a repository could put your prompts and files in traces",
    }
)
"""Every key a workspace file may not set (dotted, snake_case; camelCase is refused as well), with
what a repository could do with it. Whoever wrote a repository wrote its ``.tether/config.toml``:
these keys touch the user's store, secrets, endpoints, commands or other workspaces. Keys not
defined yet are listed ahead of time: a later one is refused as soon as it exists. Besides these, a
workspace file may only tighten ``tools.approval``, narrow ``tools.enabled``, shorten the bounds
of :data:`WAITS` and keep ``memory.paths`` inside the workspace (:func:`_refuse_loosening`,
:func:`_refuse_outside_memory`).
"""


def _refuse_untrusted(layer: Mapping[str, Any], source: str) -> None:
    for dotted, why in WORKSPACE_REFUSED.items():
        if _sets(layer, dotted.split(".")):
            raise _error(
                source,
                dotted,
                f"cannot be set in a workspace file ({why}); it belongs in your user config "
                "file, or in the environment or the editor's settings",
            )
    _refuse_outside_memory(layer, source)


def _sets(layer: Mapping[str, Any], parts: list[str]) -> bool:
    """Whether ``layer`` gives the key ``parts`` (snake_case), each part in either spelling."""
    table: Any = layer
    for part in parts:
        if not isinstance(table, Mapping):
            return False
        spelling = next((name for name in (part, to_camel(part)) if name in table), None)
        if spelling is None:
            return False
        table = table[spelling]
    return True


def _refuse_outside_memory(layer: Mapping[str, Any], source: str) -> None:
    """Memory paths of a workspace file stay inside it: no absolute, ``~`` or climbing path."""
    memory = layer.get("memory")
    paths = memory.get("paths") if isinstance(memory, Mapping) else None
    for path in paths if isinstance(paths, list) else []:
        if isinstance(path, str) and (
            path.startswith("~") or Path(path).is_absolute() or ".." in Path(path).parts
        ):
            raise _error(
                source, "memory.paths", "must stay inside the workspace in a workspace file"
            )


_STRICTNESS = {"auto": 0, "ask": 1, "deny": 2}


def _refuse_loosening(trusted: TetherConfig, config: TetherConfig, source: str) -> None:
    """A workspace file may make ``tools.approval`` stricter, ``tools.enabled`` narrower and the
    bounds of :data:`WAITS` shorter than the user's own settings, never the other way: a
    repository could otherwise run commands without asking, bring back a tool the user turned
    off, or keep runs waiting."""
    before, after = trusted.tools, config.tools
    if _STRICTNESS[after.approval] < _STRICTNESS[before.approval]:
        raise _error(
            source,
            "tools.approval",
            f'cannot be looser than "{before.approval}" in a workspace file (a repository could '
            "run commands without asking); set it in your user config file or in the editor's "
            "settings",
        )
    if before.enabled is not None and not set(after.enabled or ()) <= set(before.enabled):
        added = sorted(set(after.enabled or ()) - set(before.enabled))
        raise _error(
            source,
            "tools.enabled",
            f"may only narrow your tools.enabled in a workspace file, not add {', '.join(added)}",
        )
    if config.kernel.max_subagents > trusted.kernel.max_subagents:
        raise _error(
            source,
            "kernel.max_subagents",
            f"may only be lower than your {trusted.kernel.max_subagents} in a workspace file (a "
            "repository could run more sub-agents at once than you allow)",
        )
    _refuse_longer_waits(trusted, config, source)


WAITS: Final = ("lsp.apply_edit_timeout", "acp.request_timeout", "mcp.start_timeout")
"""Bounds on waits for a client or a server, which a workspace file may only shorten."""


def _refuse_longer_waits(trusted: TetherConfig, config: TetherConfig, source: str) -> None:
    """A repository could otherwise keep runs waiting on an editor or a server that does not
    answer for as long as it likes."""
    for dotted in WAITS:
        section, key = dotted.split(".")
        before = getattr(getattr(trusted, section), key)
        after = getattr(getattr(config, section), key)
        if after > before:
            raise _error(
                source,
                dotted,
                f"may only be shorter than your {before:g} s in a workspace file (a repository "
                "could keep runs waiting on what does not answer)",
            )


# --- the environment ----------------------------------------------------------------------------


def env_var(dotted: str) -> str:
    """The variable that sets a key: ``TETHER_`` and the dotted key, dots as ``_``, upper-cased
    (``provider.max_retries`` → ``TETHER_PROVIDER_MAX_RETRIES``). Section names hold no ``_``, so
    no two keys share a variable."""
    return "TETHER_" + dotted.replace(".", "_").upper()


def config_keys() -> list[str]:
    """Every key of :class:`TetherConfig`, dotted, in the models' order."""
    return [key for key, _ in _leaf_fields(TetherConfig, ())]


def _leaf_fields(model: type[BaseModel], path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    for name, field in model.model_fields.items():
        section = _section_of(model, name)
        if section is not None:
            yield from _leaf_fields(section, (*path, name))
        else:
            yield _dotted((*path, name)), field.annotation


EnvKind = Literal["scalar", "list", "json"]


def _env_kind(annotation: Any) -> EnvKind:
    """How a variable's text becomes the key's value: as is (pydantic parses numbers, booleans
    and choices from text), as a list of strings (a JSON array, or comma-separated), or as JSON
    (lists of tables: MCP servers, hooks)."""
    types = _alternatives(annotation)
    if any(get_origin(kind) is list for kind in types):
        items = [arg for kind in types for arg in get_args(kind)]
        return "list" if items == [str] else "json"
    return "scalar"


def _alternatives(annotation: Any) -> list[Any]:
    """The types of a union, None left out (``list[str] | None`` → ``[list[str]]``)."""
    if get_origin(annotation) in (Union, UnionType):
        return [arg for arg in get_args(annotation) if arg is not type(None)]
    return [annotation]


def _env_value(var: str, dotted: str, text: str, kind: EnvKind) -> Any:
    if kind == "scalar":
        return text
    if kind == "list" and not text.startswith("["):
        return [item.strip() for item in text.split(",") if item.strip()]
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        expected = "a JSON array or a comma-separated list" if kind == "list" else "JSON"
        raise _error(
            f"environment {var}", dotted, f"expected {expected} ({exc.msg} at {exc.pos})"
        ) from None


def _env_vars() -> Mapping[str, tuple[str, EnvKind]]:
    """Every variable the loader reads (the short names first, so that the full name of the same
    key, applied later, wins), each with its key and how its text is parsed."""
    kinds = {key: _env_kind(annotation) for key, annotation in _leaf_fields(TetherConfig, ())}
    found = {var: (key, kinds[key]) for var, key in ENV_ALIASES.items()}
    found |= {env_var(key): (key, kind) for key, kind in kinds.items()}
    return MappingProxyType(found)


def _environment_layers(environ: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """One layer per ``TETHER_*`` variable that is set and not empty, named after it."""
    for var, (dotted, kind) in ENV_VARS.items():
        text = environ.get(var, "").strip()
        if text:
            section, key = dotted.split(".")
            yield f"environment {var}", {section: {key: _env_value(var, dotted, text, kind)}}


def environment_table() -> str:
    """The Markdown table of docs/configuration.md's environment variables (a test keeps the
    docs equal to it)."""
    aliases: dict[str, list[str]] = {}
    for var, key in ENV_ALIASES.items():
        aliases.setdefault(key, []).append(f"`{var}`")
    rows = ["| variable | key | value | also |", "|---|---|---|---|"]
    for key, annotation in _leaf_fields(TetherConfig, ()):
        also = ", ".join(aliases.get(key, []))
        rows.append(f"| `{env_var(key)}` | `{key}` | {_value_text(annotation)} | {also} |")
    return "\n".join(rows) + "\n"


def _value_text(annotation: Any) -> str:
    kind = _env_kind(annotation)
    if kind == "list":
        return "a comma-separated list, or a JSON array"
    if kind == "json":
        return "a JSON array of tables"
    types = _alternatives(annotation)
    choices = [arg for kind in types if get_origin(kind) is Literal for arg in get_args(kind)]
    if choices:
        return " \\| ".join(f"`{choice}`" for choice in choices)
    names = {bool: "`true` \\| `false`", int: "an integer", float: "a number", str: "text"}
    return next((names[kind] for kind in types if kind in names), "text")


# --- where each key comes from (`tether config show`) ---------------------------------------------


DEFAULT_SOURCE: Final = "default"


@dataclass(frozen=True, kw_only=True)
class ConfigEntry:
    """One key of the configuration in force: its value (secrets masked) and the layer that set it
    (``default``, ``user file PATH``, ``workspace file PATH``, ``environment VAR``, or the name
    the caller gave its overlay)."""

    key: str
    value: Any
    source: str


def explain_config(
    *,
    workspace: Path | None,
    environ: Mapping[str, str] = os.environ,
    overlay: Mapping[str, Any] | None = None,
    overlay_source: str = INIT_OPTIONS_SOURCE,
    on_workspace_error: Callable[[ConfigError], None] | None = None,
) -> list[ConfigEntry]:
    """Every key of :func:`load_config`'s configuration (``overlay`` as its
    ``initializationOptions``), each with the last layer that set it. The layers are read as
    :func:`load_config` reads them, so a workspace file it leaves out is no key's source."""
    refused: list[ConfigError] = []

    def workspace_refused(error: ConfigError) -> None:
        refused.append(error)
        if on_workspace_error is not None:
            on_workspace_error(error)

    config = load_config(
        workspace=workspace,
        environ=environ,
        init_options=overlay,
        on_workspace_error=workspace_refused if on_workspace_error is not None else None,
    )
    layers: list[tuple[str, Mapping[str, Any]]] = []
    user_file = user_config_path(environ)
    if user_file is not None and (layer := _read_toml(user_file)) is not None:
        layers.append((f"user file {user_file}", layer))
    if workspace is not None and not refused:
        path = workspace_config_path(workspace)
        if (layer := _read_toml(path, inside=workspace)) is not None:
            layers.append((f"workspace file {path}", layer))
    layers.extend(_environment_layers(environ))
    if overlay:
        layers.append((overlay_source, overlay))
    sources: dict[str, str] = {}
    for source, given in layers:
        for key in _keys_set(given, TetherConfig, ()):
            sources[key] = source
    return [
        ConfigEntry(key=key, value=_masked(key, value), source=sources.get(key, DEFAULT_SOURCE))
        for key, value in _leaves(config.model_dump(mode="json"), TetherConfig, ())
    ]


def _keys_set(
    layer: Mapping[str, Any], model: type[BaseModel], path: tuple[str, ...]
) -> Iterator[str]:
    """The dotted keys (snake_case) of the leaves ``layer`` gives a value (None is absent)."""
    names = _field_names(model)
    for key, value in layer.items():
        name = names.get(key) if isinstance(key, str) else None
        if name is None or value is None:
            continue
        section = _section_of(model, name)
        if section is not None and isinstance(value, Mapping):
            yield from _keys_set(value, section, (*path, name))
        elif section is None:
            yield _dotted((*path, name))


def _leaves(
    values: Mapping[str, Any], model: type[BaseModel], path: tuple[str, ...]
) -> Iterator[tuple[str, Any]]:
    for name in model.model_fields:
        section = _section_of(model, name)
        if section is not None:
            yield from _leaves(values[name], section, (*path, name))
        else:
            yield _dotted((*path, name)), values[name]


MASK: Final = "********"
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]+@")


def _masked(key: str, value: Any) -> Any:
    """``value`` with what may be a secret replaced by :data:`MASK`: a URL's password, the
    environment and headers of MCP servers, and a key named like a secret (``api_key_env`` names
    a variable: it is shown)."""
    last = key.rsplit(".", 1)[-1]
    if last != "api_key_env" and any(word in last for word in _SECRET_WORDS) and value:
        return MASK
    if isinstance(value, str):
        return _URL_PASSWORD.sub(rf"\g<1>{MASK}@", value)
    if key == "tools.mcp_servers" and isinstance(value, list):
        return [_masked_server(server) for server in value]
    return value


def _masked_server(server: Any) -> Any:
    if not isinstance(server, dict):
        return server
    masked = {name: _masked(name, value) for name, value in server.items()}
    for table in ("env", "headers"):
        if isinstance(server.get(table), dict):
            masked[table] = dict.fromkeys(server[table], MASK)
    return masked


# --- merging ------------------------------------------------------------------------------------


def _overlay(
    config: TetherConfig, layer: Mapping[str, Any] | None, source: str, *, strict: bool
) -> TetherConfig:
    """``layer`` merged onto ``config`` and validated; ``strict`` is off only for strings."""
    if layer is None:
        return config
    if not isinstance(layer, Mapping):
        raise _error(source, None, "expected a table of sections")
    merged = _merge(config.model_dump(), layer, TetherConfig, source, ())
    try:
        return TetherConfig.model_validate(merged, strict=strict)
    except ValidationError as exc:
        # not chained: the original error's text carries the input values
        raise _validation_error(exc, source) from None


def _merge(
    base: dict[str, Any],
    layer: Mapping[str, Any],
    model: type[BaseModel],
    source: str,
    path: tuple[str, ...],
) -> dict[str, Any]:
    """``base`` (by field name) with ``layer`` (either spelling) merged in, section by section."""
    merged = dict(base)
    names = _field_names(model)
    seen: set[str] = set()
    for key, value in layer.items():
        name = names.get(key) if isinstance(key, str) else None
        if name is None:
            raise _error(source, _dotted((*path, str(key))), "unknown key")
        if name in seen:
            raise _error(source, _dotted((*path, name)), "given twice (snake_case and camelCase)")
        seen.add(name)
        if value is None:
            continue
        section = _section_of(model, name)
        current = merged.get(name)
        if section is not None and isinstance(value, Mapping) and isinstance(current, dict):
            merged[name] = _merge(current, value, section, source, (*path, name))
        else:
            merged[name] = value
    return merged


@cache
def _field_names(model: type[BaseModel]) -> Mapping[str, str]:
    """Every accepted spelling of the model's keys (name and alias) → the field name."""
    names: dict[str, str] = {}
    for name, field in model.model_fields.items():
        names[name] = name
        if field.alias:
            names[field.alias] = name
    return MappingProxyType(names)


def _section_of(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The model of field ``name`` when it is a nested section, else None."""
    annotation = model.model_fields[name].annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


# --- errors -------------------------------------------------------------------------------------


def _error(source: str, key: str | None, problem: str, *, reason: str | None = None) -> ConfigError:
    """A ConfigError about ``key`` of the layer ``source``; ``reason`` (``data.reason``) says why
    a whole file was refused: a :class:`tether.repofiles.Refusal`, ``not_utf8``,
    ``invalid_toml`` or ``too_deep``."""
    where = f"{source}: {key}" if key else source
    data: dict[str, Any] = {"key": key, "source": source}
    if reason is not None:
        data["reason"] = str(reason)
    return ConfigError(f"invalid configuration in {where}: {problem}", data)


def _validation_error(exc: ValidationError, source: str) -> ConfigError:
    """The first problem of ``exc`` as a ConfigError (with a count of the others)."""
    errors = exc.errors()
    first = errors[0]
    key = _key_of(first)
    problem = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    if _echoable(key, first["input"]) and first["type"] != "extra_forbidden":
        problem += f" (got {_shorten(repr(first['input']))})"
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more)"
    return _error(source, key, problem)


def _key_of(error: ErrorDetails) -> str:
    """The dotted key of an error, spelled snake_case where the key is known."""
    parts: list[str] = []
    model: type[BaseModel] | None = TetherConfig
    for part in error["loc"]:
        if isinstance(part, str) and model is not None:
            name = _field_names(model).get(part)
            parts.append(name or part)
            model = _section_of(model, name) if name else None
        else:
            parts.append(str(part))
            model = None
    return _dotted(tuple(parts))


def _dotted(parts: tuple[str, ...]) -> str:
    return ".".join(parts)


def _echoable(key: str, value: object) -> bool:
    """Whether ``value`` may appear in a message: a scalar under a name that holds no secret."""
    if not isinstance(value, str | int | float | bool):
        return False
    lowered = key.lower()
    if lowered.startswith("tools.mcp_servers.") and (".env." in lowered or ".headers." in lowered):
        return False  # environment variables and headers of MCP servers often hold credentials
    return not any(word in lowered for word in _SECRET_WORDS)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_ECHO else text[: _MAX_ECHO - 1] + "…"


# after the helpers it needs
ENV_VARS: Final[Mapping[str, tuple[str, EnvKind]]] = _env_vars()
"""The environment variables tether reads, each with the dotted key it sets and its parsing."""
