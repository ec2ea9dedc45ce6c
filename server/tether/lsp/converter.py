"""The cattrs converter pygls is given: lsprotocol's, minus the namedtuple trap.

pygls's default converter rebuilds the params of every method it has no type for as nested
namedtuples (a JSON round trip per message, ~50x slower than parsing). tether's methods take plain
dicts, so requests, notifications and responses of unknown methods keep their payload as decoded.
"""

from __future__ import annotations

from typing import Any

from cattrs import Converter
from lsprotocol import converters
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage


def _keep_payload(data: dict[str, Any], cls: type[Any]) -> Any:
    if cls is JsonRPCResponseMessage:
        return cls(id=data["id"], jsonrpc=data["jsonrpc"], result=data.get("result"))
    if cls is JsonRPCRequestMessage:
        return cls(
            id=data["id"], method=data["method"], jsonrpc=data["jsonrpc"], params=data.get("params")
        )
    return cls(method=data["method"], jsonrpc=data["jsonrpc"], params=data.get("params"))


def make_converter() -> Converter:
    converter = converters.get_converter()
    for cls in (JsonRPCRequestMessage, JsonRPCNotification, JsonRPCResponseMessage):
        converter.register_structure_hook(cls, _keep_payload)
    return converter
