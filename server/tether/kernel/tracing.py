"""The kernel's hook into tracing: whether a run is traced, and then its spans.

:mod:`tether.telemetry` (and OpenTelemetry with it) is imported only for a run that is traced,
so a server that never traces never loads it. Tracing asked for without the ``tether[otel]``
extra installed is logged once, and runs go on untraced.

The ``OTEL_*`` variables are read once per process (as the OpenTelemetry SDK reads them): each
lookup in ``os.environ`` costs ~2 µs, and a run that is not traced should cost nothing more.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING

from tether.config import TelemetryConfig
from tether.providers.base import Provider

if TYPE_CHECKING:
    from tether.telemetry import RunTelemetry

logger = logging.getLogger(__name__)
_missing_reported = False


def run_telemetry(
    config: TelemetryConfig,
    *,
    session_id: str,
    run_id: str,
    model: str,
    provider: Provider,
    redact: Callable[[str], str],
    environ: Mapping[str, str] | None = None,
) -> RunTelemetry | None:
    """The spans of a run, or None when it is not traced (``environ``: read instead of the
    process's environment, uncached)."""
    if config.enabled is False:
        return None
    if environ is not None:
        if not config.tracing(environ):
            return None
    elif not config.enabled and not _environment_asks():
        return None
    try:  # the API alone may be there (the MCP SDK needs it), without the SDK and exporters
        from tether import telemetry

        tracer = telemetry.tracer(os.environ if environ is None else environ)
    except ImportError as exc:
        _report_missing(exc)
        return None
    return telemetry.RunTelemetry(
        tracer=tracer,
        session_id=session_id,
        run_id=run_id,
        model=model,
        provider=provider.genai_name,
        capture_content=config.capture_content,
        redact=redact,
    )


@cache
def _environment_asks() -> bool:
    """Whether the process's ``OTEL_*`` variables ask for traces."""
    return TelemetryConfig().tracing(os.environ)


def _report_missing(exc: ImportError) -> None:
    global _missing_reported
    if not _missing_reported:
        _missing_reported = True
        logger.warning(
            "tracing is on (telemetry.enabled or the OTEL_* variables) but OpenTelemetry cannot "
            "be imported (%s): install tether[otel]; runs go on untraced",
            exc,
        )
