"""``tether doctor``: what stands between this machine and a working tether, one verdict per check.

Each check reads the configuration as ``tether serve`` would (:func:`tether.config.load_config`
for the workspace) and tries the real thing: the provider's model list is fetched with its key
(so an unreachable endpoint, a refused key and an unknown model each get their own verdict), the
session store is opened and written to, the sandbox is probed, each MCP server is started. A
verdict says what was found and, when something is wrong, how to fix it. ``fail`` means tether
will not work as configured (the exit code is then 1); ``warn`` means it works with less than it
could (no Landlock, no key for a local server).

Nothing it prints holds a secret: keys are named by their variable, never shown, and every line
is redacted of the keys and URL passwords it knows.
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from tether.config import (
    McpServerConfig,
    ProviderConfig,
    SessionsConfig,
    TetherConfig,
    ToolsConfig,
    load_config,
)
from tether.protocol import ConfigError
from tether.secrets import PROVIDER_KEY_VARIABLES, Secrets, url_secrets

if TYPE_CHECKING:
    from tether.providers.http import ModelListing
    from tether.tools.confinement import McpSandbox

Status = Literal["ok", "warn", "fail", "skip"]

PROBE_SECONDS: Final = 10.0
"""The most the model-list request waits (less when ``provider.timeout`` is shorter)."""

_MARKS: Final[Mapping[Status, str]] = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}
_CONFIG_HINT: Final = "`tether config show` lists every key with the layer that set it"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One check's outcome: ``detail`` says what was found, ``fix`` what to do about it."""

    check: str
    status: Status
    detail: str
    fix: str | None = None

    def line(self) -> str:
        fix = f" — fix: {self.fix}" if self.fix else ""
        return f"{_MARKS[self.status]}  {self.check}: {self.detail}{fix}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def failed(verdicts: Sequence[Verdict]) -> bool:
    return any(verdict.status == "fail" for verdict in verdicts)


def summary(verdicts: Sequence[Verdict]) -> str:
    problems = sum(verdict.status == "fail" for verdict in verdicts)
    warnings = sum(verdict.status == "warn" for verdict in verdicts)
    if problems:
        return f"tether doctor: {problems} problem(s) to fix, {warnings} warning(s)"
    return f"tether doctor: ready ({warnings} warning(s))"


async def diagnose(workspace: Path, environ: Mapping[str, str] = os.environ) -> list[Verdict]:
    """Every check, in the order a person fixes them: configuration, model, store, sandbox, MCP
    servers, editors."""
    refused: list[ConfigError] = []
    try:
        config = load_config(
            workspace=workspace, environ=environ, on_workspace_error=refused.append
        )
    except ConfigError as exc:
        return [Verdict(check="config", status="fail", detail=exc.message, fix=_CONFIG_HINT)]
    verdicts = [_config_verdict(refused)]
    verdicts += await _provider_verdicts(config.provider, environ)
    verdicts.append(await _store_verdict(config.sessions, workspace, environ))
    verdicts += _sandbox_verdicts(config.tools)
    verdicts += await _mcp_verdicts(config, workspace)
    verdicts.append(_editor_verdict(environ))
    secrets = _secrets(config, environ)
    return [_redacted(verdict, secrets) for verdict in verdicts]


def _config_verdict(refused: Sequence[ConfigError]) -> Verdict:
    if refused:
        return Verdict(
            check="config",
            status="warn",
            detail=f"the workspace file is left out: {refused[0].message}",
            fix="correct .tether/config.toml, or move the key to your user config file",
        )
    return Verdict(check="config", status="ok", detail="every configuration layer is valid")


# --- the provider: type, key, endpoint, model -----------------------------------------------------


async def _provider_verdicts(config: ProviderConfig, environ: Mapping[str, str]) -> list[Verdict]:
    if config.type is None:
        return [
            Verdict(
                check="provider",
                status="fail",
                detail="no provider is configured",
                fix="set TETHER_PROVIDER (openai, anthropic or gemini) and TETHER_MODEL, or "
                "[provider] type and model in ~/.config/tether/config.toml "
                "(`tether run --demo` needs neither)",
            )
        ]
    if config.type == "scripted":
        return [_script_verdict(config)]
    if not config.model:
        return [
            Verdict(
                check="provider",
                status="fail",
                detail=f"{config.type}, but no model is configured",
                fix="set TETHER_MODEL, or provider.model in your config file",
            )
        ]
    provider = Verdict(check="provider", status="ok", detail=f"{config.type}, model {config.model}")
    return [provider, *await _endpoint_verdicts(config, environ)]


def _script_verdict(config: ProviderConfig) -> Verdict:
    script = Path(config.script).expanduser() if config.script else None
    if script is None or not script.is_file():
        return Verdict(
            check="provider",
            status="fail",
            detail=f"scripted, but its script {config.script or '(none)'} is not a file",
            fix="set provider.script to the path of a script file",
        )
    return Verdict(check="provider", status="ok", detail=f"scripted, playing {script}")


def _key_variables(config: ProviderConfig) -> tuple[str, ...]:
    assert config.type is not None and config.type != "scripted"
    if config.api_key_env:
        return (config.api_key_env,)
    return PROVIDER_KEY_VARIABLES[config.type]


async def _endpoint_verdicts(config: ProviderConfig, environ: Mapping[str, str]) -> list[Verdict]:
    """The key, the endpoint and the model, from one request for the model list."""
    import httpx

    from tether.providers import make_provider
    from tether.providers.http import HttpProvider

    variables = _key_variables(config)
    key_variable = next((name for name in variables if environ.get(name)), None)
    if config.api_key_env and key_variable is None:
        return [
            Verdict(
                check="key",
                status="fail",
                detail=f"provider.api_key_env names {config.api_key_env}, which is not set",
                fix=f"set {config.api_key_env} to your API key, or change provider.api_key_env",
            )
        ]
    try:
        provider = make_provider(config, environ=environ)
    except ConfigError as exc:
        return [Verdict(check="endpoint", status="fail", detail=exc.message, fix=_CONFIG_HINT)]
    assert isinstance(provider, HttpProvider)
    try:
        listing: ModelListing | str = await provider.list_models(
            seconds=min(config.timeout, PROBE_SECONDS)
        )
    except httpx.HTTPError as exc:
        listing = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        await provider.aclose()
    if isinstance(listing, str):
        return [
            _key_verdict(key_variable, variables, None),
            Verdict(
                check="endpoint",
                status="fail",
                detail=f"cannot reach {provider.models_url()} ({listing})",
                fix="check provider.base_url (TETHER_BASE_URL) and that the server is running",
            ),
            Verdict(
                check="model", status="skip", detail="not checked: the endpoint is unreachable"
            ),
        ]
    return [
        _key_verdict(key_variable, variables, listing.status),
        _listing_verdict(listing),
        _model_verdict(config.model or "", listing),
    ]


def _key_verdict(found: str | None, variables: Sequence[str], status: int | None) -> Verdict:
    """``status``: what the key got from the model list (None: the endpoint was not reached)."""
    names = " or ".join(variables)
    if status in (401, 403):
        detail = (
            f"the endpoint refuses the key in {found} (HTTP {status})"
            if found
            else f"the endpoint asks for a key and {names} is not set (HTTP {status})"
        )
        return Verdict(
            check="key", status="fail", detail=detail, fix=f"set {names} to a valid API key"
        )
    if found is None:
        return Verdict(
            check="key",
            status="warn",
            detail=f"{names} is not set; requests go without a key",
            fix=f"set {names} unless the endpoint needs no key (a local server)",
        )
    accepted = " and the endpoint accepts it" if status is not None and status < 400 else ""
    return Verdict(check="key", status="ok", detail=f"{found} is set{accepted}")


def _listing_verdict(listing: ModelListing) -> Verdict:
    if listing.status >= 500:
        return Verdict(
            check="endpoint",
            status="fail",
            detail=f"{listing.url} fails (HTTP {listing.status})",
            fix="the server is in trouble: look at its log, or try again later",
        )
    if listing.status in (401, 403) or listing.status < 300:
        count = f", {len(listing.models)} models listed" if listing.status < 300 else ""
        return Verdict(check="endpoint", status="ok", detail=f"{listing.url} answers{count}")
    return Verdict(
        check="endpoint",
        status="warn",
        detail=f"{listing.url} answers HTTP {listing.status} to the model list",
        fix="check provider.base_url (TETHER_BASE_URL): it may miss a path such as /v1",
    )


def _model_verdict(model: str, listing: ModelListing) -> Verdict:
    if listing.status >= 300:
        return Verdict(check="model", status="skip", detail="not checked: no model list")
    models = listing.models
    wanted = model.removeprefix("models/")
    if wanted in models:
        return Verdict(check="model", status="ok", detail=f"{model} is listed by the endpoint")
    near = difflib.get_close_matches(wanted, models, n=3, cutoff=0.4) or list(models[:3])
    suggestion = f" (such as {', '.join(near)})" if near else ""
    return Verdict(
        check="model",
        status="fail",
        detail=f"{model} is not among the {len(models)} models the endpoint lists",
        fix=f"set TETHER_MODEL or provider.model to a listed model{suggestion}",
    )


# --- the session store ---------------------------------------------------------------------------


async def _store_verdict(
    config: SessionsConfig, workspace: Path, environ: Mapping[str, str]
) -> Verdict:
    url = config.url(environ)
    if url is None:
        return Verdict(
            check="store",
            status="ok",
            detail="sessions are kept in memory and end with the server",
            fix=None,
        )
    from tether.protocol.sessions import CreateSessionParams
    from tether.sessions.opening import url_kind
    from tether.sessions.sql import SqlStore
    from tether.sessions.sql.schema import SCHEMA_VERSION

    where = f"{url_kind(url)} store {url}"
    try:
        store = await SqlStore.open(url)
    except Exception as exc:
        return Verdict(
            check="store",
            status="fail",
            detail=f"the {where} does not open ({_describe(exc)})",
            fix="check sessions.store and sessions.path, and that you may write there",
        )
    try:
        session = await store.create(CreateSessionParams(title="tether doctor"), str(workspace))
        await store.delete(session.session_id)
    except Exception as exc:
        return Verdict(
            check="store",
            status="fail",
            detail=f"the {where} opens but refuses writes ({_describe(exc)})",
            fix="make the database (and its directory) writable for you, or choose another "
            "sessions.path",
        )
    finally:
        await store.aclose()
    return Verdict(
        check="store",
        status="ok",
        detail=f"the {where} opens and takes writes (schema version {SCHEMA_VERSION})",
    )


def _describe(exc: BaseException) -> str:
    text = (getattr(exc, "message", None) or str(exc)).strip().split("\n", 1)[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- the sandbox, MCP servers, editors ------------------------------------------------------------


def _sandbox_verdicts(tools: ToolsConfig) -> list[Verdict]:
    from tether.tools.confinement import isolation, landlock_abi

    if tools.sandbox == "off":
        return [
            Verdict(
                check="sandbox",
                status="warn",
                detail='tools.sandbox is "off": commands run with all your rights',
                fix='set tools.sandbox = "workspace-write"',
            )
        ]
    abi = landlock_abi()
    if abi == 0:
        return [
            Verdict(
                check="sandbox",
                status="warn",
                detail="Landlock is not available: commands run without an OS sandbox",
                fix="use Linux 5.13 or later with Landlock enabled (the kernel's lsm= list)",
            )
        ]
    landlock = Verdict(check="sandbox", status="ok", detail=f"Landlock ABI {abi} confines commands")
    if isolation().namespaces:
        spaces = Verdict(check="namespaces", status="ok", detail="mount and pid namespaces work")
    else:
        spaces = Verdict(
            check="namespaces",
            status="warn",
            detail="mount and pid namespaces are not available: Landlock alone protects "
            ".git and .tether",
            fix="allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            "on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)",
        )
    return [landlock, spaces]


async def _mcp_verdicts(config: TetherConfig, workspace: Path) -> list[Verdict]:
    """Each configured server started as a run starts it: in its working directory, inside
    ``tools.mcp_sandbox``."""
    from tether.kernel.kernel import sandbox_policy
    from tether.tools.confinement import McpSandbox

    servers = config.tools.mcp_servers
    if not servers:
        return [Verdict(check="mcp", status="skip", detail="no MCP server is configured")]
    sandbox = McpSandbox(sandbox_policy(config, mcp=True), workspace)
    seconds = config.mcp.start_timeout
    return [await _mcp_verdict(spec, workspace, sandbox, seconds) for spec in servers]


async def _mcp_verdict(
    spec: McpServerConfig, workspace: Path, sandbox: McpSandbox, seconds: float
) -> Verdict:
    from tether.tools.mcp.manager import McpServer, server_cwd

    server = McpServer(spec, server_cwd(spec, workspace), sandbox)
    try:
        tools = await server.refresh(seconds)
    finally:
        await server.aclose()
    check = f"mcp {spec.name}"
    if server.error is not None:
        return Verdict(
            check=check,
            status="fail",
            detail=f"does not start: {server.error}",
            fix="check its entry in tools.mcp_servers, and run its command by hand to see why",
        )
    return Verdict(check=check, status="ok", detail=f"starts and lists {len(tools)} tools")


def _editor_verdict(environ: Mapping[str, str]) -> Verdict:
    found = shutil.which("tether", path=environ.get("PATH", os.defpath))
    if found is None:
        return Verdict(
            check="editors",
            status="warn",
            detail="`tether` is not on PATH: VS Code and Neovim fall back to "
            "`python3 -P -m tether serve`",
            fix="`uv tool install tether` or `pipx install tether`, or set the editor's command "
            "(VS Code: tether.serverCommand; Neovim: cmd) to the full path of tether",
        )
    return Verdict(
        check="editors",
        status="ok",
        detail=f"VS Code and Neovim start {found} serve; ACP editors (Zed, JetBrains) take "
        f"the command `{found} acp`",
    )


# --- secrets --------------------------------------------------------------------------------------


def _secrets(config: TetherConfig, environ: Mapping[str, str]) -> Secrets:
    values: list[str] = []
    if config.provider.type not in (None, "scripted"):
        values += [environ[name] for name in _key_variables(config.provider) if environ.get(name)]
    values += url_secrets(config.provider.base_url) + url_secrets(config.sessions.url(environ))
    return Secrets.of(values)


def _redacted(verdict: Verdict, secrets: Secrets) -> Verdict:
    if not secrets:
        return verdict
    fix = secrets.redact(verdict.fix) if verdict.fix else None
    return Verdict(
        check=verdict.check, status=verdict.status, detail=secrets.redact(verdict.detail), fix=fix
    )
