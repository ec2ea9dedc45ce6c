"""A client that speaks newline-delimited JSON (an Agent Client Protocol client, say) to
``tether serve``, which frames messages with ``Content-Length`` headers: each of its lines is
answered, in its own format, with an error that names ``tether acp``, rather than left waiting
for a header that never comes."""

from __future__ import annotations

import orjson

from tether.protocol import ErrorCode

MESSAGE = (
    "tether serve speaks JSON-RPC with LSP framing (Content-Length headers); for newline-delimited "
    "JSON (the Agent Client Protocol) run `tether acp`"
)


def looks_like_ndjson(data: bytes) -> bool:
    """Bytes where a header is expected that are a JSON object line, with no header anywhere."""
    return data.lstrip()[:1] == b"{" and b"content-length" not in data.lower()


def ndjson_refusal(data: bytes) -> bytes:
    """One error line per line of ``data`` (with the line's id, when it has one)."""
    out = bytearray()
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            message = None
        msg_id = message.get("id") if isinstance(message, dict) else None
        if isinstance(message, dict) and "id" not in message:
            continue  # a notification gets no answer
        if not isinstance(msg_id, str | int) or isinstance(msg_id, bool):
            msg_id = None
        error = {"code": int(ErrorCode.INVALID_REQUEST), "message": MESSAGE}
        out += orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error}) + b"\n"
    return bytes(out)
