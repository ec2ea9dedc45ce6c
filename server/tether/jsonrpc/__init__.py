"""The one JSON-RPC 2.0 core both faces share, whatever their framing.

tether's own protocol (:mod:`tether.rpc.wire`, LSP framing) and ACP (:mod:`tether.acp.wire`,
NDJSON) differ in how bytes become messages and in a few codes; everything else is here, once:

- :mod:`~tether.jsonrpc.errors`: :class:`ClientError` (the peer's error answer to our request),
  :class:`RpcError` (a handler's own error answer), and :class:`ErrorTable`, the one map from an
  exception to an error object, with each face's codes in its own table;
- :mod:`~tether.jsonrpc.envelope`: a body decoded and its envelope checked (``jsonrpc: "2.0"``,
  id types, ``method``, ``params``, batches refused), per face's :class:`EnvelopePolicy`;
- :mod:`~tether.jsonrpc.router`: requests run by their handlers in arrival order, each started
  eagerly (:mod:`~tether.jsonrpc.eager`), cancellable by id while it waits;
- :mod:`~tether.jsonrpc.outgoing`: our requests to the peer, the answers routed back by id, and
  their withdrawal when the one waiting is cancelled.

Imports nothing of tether but :mod:`tether.protocol` (its error codes and errors).
"""
