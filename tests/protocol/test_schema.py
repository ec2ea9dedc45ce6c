"""The checked-in JSON Schema is the one the models generate."""

from __future__ import annotations

import json
from pathlib import Path

from tether.protocol.schema import protocol_schema

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "protocol.schema.json"
STALE = "docs/protocol.schema.json is out of date with the models: run `make schema`"


def test_the_checked_in_schema_matches_the_models() -> None:
    assert SCHEMA_FILE.is_file(), STALE
    checked_in = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert checked_in == json.loads(json.dumps(protocol_schema())), STALE


def test_the_schema_defines_the_main_wire_types() -> None:
    defs = protocol_schema()["$defs"]
    assert {"Message", "MessageInput", "Session", "RunResult", "ProgressParams"} <= set(defs)


def test_the_schema_uses_camel_case_property_names() -> None:
    message = protocol_schema()["$defs"]["Message"]
    assert {"toolCalls", "toolCallId", "createdAt"} <= set(message["properties"])
    assert "created_at" not in message["properties"]


def test_the_schema_declares_json_schema_2020_12() -> None:
    assert protocol_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
