"""tether's own face: the JSON-RPC wire (pygls-free), its handlers, the transports.

The pygls server for the standard LSP methods is the LSP face's (:mod:`tether.lsp`), handed to the
transports by the caller (:class:`tether.rpc.transport.LspFace`).
"""
