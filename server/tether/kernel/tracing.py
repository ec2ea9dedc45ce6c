"""The kernel's hook into tracing: whether a run is traced, and then its spans.

:mod:`tether.telemetry` (and OpenTelemetry with it) is imported only for a run that is traced,
so a server that never traces never loads it. Tracing asked for without the ``tether[otel]``
extra installed is logged once, and runs go on untraced.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
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
    environ: Mapping[str, str] = os.environ,
) -> RunTelemetry | None:
    """The spans of a run, or None when it is not traced."""
    if not config.tracing(environ):
        return None
    try:
        from tether import telemetry
    except ImportError as exc:
        _report_missing(exc)
        return None
    return telemetry.RunTelemetry(
        tracer=telemetry.tracer(environ),
        session_id=session_id,
        run_id=run_id,
        model=model,
        provider=provider.genai_name,
        capture_content=config.capture_content,
        redact=redact,
    )


def _report_missing(exc: ImportError) -> None:
    global _missing_reported
    if not _missing_reported:
        _missing_reported = True
        logger.warning(
            "tracing is on (telemetry.enabled or the OTEL_* variables) but OpenTelemetry cannot "
            "be imported (%s): install tether[otel]; runs go on untraced",
            exc,
        )
