"""Secrets known by value: what never reaches a command's environment, a tool result or a log.

Hiding environment variables by name (:func:`looks_secret`: ``OPENAI_API_KEY``, ``PGPASSWORD``)
misses a secret under an innocent name: ``TETHER_SESSIONS_STORE=postgresql://u:PASSWORD@db/t``,
as the docs advise, or a ``DATABASE_URL``. So tether also knows the secrets of its configuration
by value (:func:`configured_secrets`): the provider API keys, the password of the store's URL
and of the provider's base URL, and the values of MCP servers' ``env`` and ``headers`` that look
secret. A command gets no variable whose value contains one (:meth:`Secrets.hides`), and every
tool result has them replaced by :data:`REDACTED` (:meth:`Secrets.redact`, in the one place the
kernel records results). Log records are redacted the same way once :func:`redact_logs` is on.

A value shorter than :data:`MIN_SECRET_CHARS` is not looked for: it would blot out ordinary
text, and hides nothing a guess would not find.

This module imports nothing of tether, so every layer may use it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from tether.config import TetherConfig
    from tether.protocol.tools import McpServerSpec

REDACTED: Final = "[redacted]"
MIN_SECRET_CHARS: Final = 6

PROVIDER_KEY_VARIABLES: Final = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
"""The variables each provider reads its API key from when ``provider.api_key_env`` is unset."""

# Anywhere in the name; AUTH and AUTHORIZATION only as a word of it (not GIT_AUTHOR_NAME).
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|COOKIE"
    r"|(?<![A-Z])AUTH(?:ORIZATION)?(?![A-Z])",
    re.IGNORECASE,
)


def looks_secret(name: str) -> bool:
    """Whether a variable or header of this name likely holds a credential."""
    return _SECRET_NAME.search(name) is not None


@dataclass(frozen=True, slots=True)
class Secrets:
    """Secret values, the longest first (so a secret that contains another is replaced whole)."""

    values: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Iterable[str]) -> Secrets:
        kept = {value for value in values if len(value) >= MIN_SECRET_CHARS}
        return cls(tuple(sorted(kept, key=lambda value: (-len(value), value))))

    def __bool__(self) -> bool:
        return bool(self.values)

    def __or__(self, other: Secrets) -> Secrets:
        return self if not other else Secrets.of((*self.values, *other.values))

    def hides(self, text: str) -> bool:
        """Whether ``text`` contains a secret."""
        return any(value in text for value in self.values)

    def redact(self, text: str) -> str:
        """``text`` with each secret replaced by :data:`REDACTED`. One scan per secret, in C
        (``str.__contains__``): a result of a MiB with a few secrets costs well under a
        millisecond (``bench/secrets_bench.py``)."""
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def redact_json(self, value: Any) -> Any:
        """A JSON value with the secrets of its strings (keys too) redacted."""
        if not self.values:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self.redact_json(item) for item in value]
        if isinstance(value, dict):
            return {self.redact(str(k)): self.redact_json(v) for k, v in value.items()}
        return value


def url_secrets(url: str | None) -> list[str]:
    """The password of ``url`` as written and decoded (``p%40ss`` and ``p@ss``); none when it
    has none."""
    if not url or "@" not in url:
        return []
    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


def shown_url(url: str) -> str:
    """``url`` as a log line may show it: no user or password, and ``?…`` for a query or
    fragment (a key may be carried there)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "(an invalid URL)"
    if ":" in host:
        host = f"[{host}]"
    rest = "?…" if parts.query or parts.fragment else ""
    return f"{parts.scheme}://{host}{port}{parts.path}{rest}"


def header_secrets(value: str) -> list[str]:
    """A secret header's value, and its credentials without the scheme (``Bearer abc`` →
    ``abc``), which a result may show alone."""
    scheme, _, credentials = value.strip().partition(" ")
    return [value, credentials.strip()] if credentials.strip() else [scheme]


def server_secrets(servers: Iterable[McpServerSpec]) -> list[str]:
    """What the MCP servers' specs hold that looks secret: the values of ``env`` and
    ``headers`` under names that look secret, and passwords in URLs anywhere in them."""
    found: list[str] = []
    for server in servers:
        found += url_secrets(server.url)
        for name, value in server.env.items():
            found += [value] if looks_secret(name) else url_secrets(value)
        for name, value in server.headers.items():
            found += header_secrets(value) if looks_secret(name) else url_secrets(value)
    return found


def configured_secrets(
    config: TetherConfig,
    environ: Mapping[str, str],
    servers: Iterable[McpServerSpec] = (),
) -> Secrets:
    """The secrets of ``config`` (read with ``environ``, where the API keys are) and of the MCP
    servers a session was given (``servers``)."""
    provider = config.provider
    names = {name for names in PROVIDER_KEY_VARIABLES.values() for name in names}
    if provider.api_key_env:
        names.add(provider.api_key_env)
    found = [environ.get(name, "") for name in sorted(names)]
    found += url_secrets(config.sessions.store) + url_secrets(provider.base_url)
    found += server_secrets([*config.tools.mcp_servers, *servers])
    return Secrets.of(found)


# -- logs ------------------------------------------------------------------------------------

_logged = Secrets()
_lock = threading.Lock()
_installed = False


def register(secrets: Secrets) -> None:
    """Redact these secrets from every log record from now on (with :func:`redact_logs`)."""
    global _logged
    if not secrets or all(value in _logged.values for value in secrets.values):
        return
    with _lock:
        _logged = _logged | secrets


def redact_logs() -> None:
    """Make every log record carry its message with the registered secrets redacted (its
    arguments and traceback formatted then, not later). Once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    make = logging.getLogRecordFactory()

    def redacting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        secrets = _logged
        if secrets:
            _redact_record(record, secrets)
        return record

    logging.setLogRecordFactory(redacting)


def _redact_record(record: logging.LogRecord, secrets: Secrets) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it when the record is handled
        return
    record.msg, record.args = secrets.redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = secrets.redact(logging.Formatter().formatException(record.exc_info))
