"""Fakes at the boundaries: a real loopback model endpoint (the scripted provider ships in
``tether.providers``)."""

from tests.fakes.model_server import (
    Call,
    Hang,
    ModelServer,
    Raw,
    RecordedRequest,
    Reply,
    Reset,
    Response,
    Status,
    Truncate,
)

__all__ = [
    "Call",
    "Hang",
    "ModelServer",
    "Raw",
    "RecordedRequest",
    "Reply",
    "Reset",
    "Response",
    "Status",
    "Truncate",
]
