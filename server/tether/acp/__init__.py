"""The Agent Client Protocol face: ``tether acp`` serves ACP v1 (JSON-RPC 2.0 as newline-delimited
JSON on stdio) from the same session service and kernel as ``tether serve``.

- :mod:`tether.acp.wire` — the NDJSON wire on the shared JSON-RPC core (:mod:`tether.jsonrpc`),
  with ACP's error codes (:data:`~tether.acp.wire.ACP_ERRORS`);
- :mod:`tether.acp.agent` — the ACP methods, translated onto :class:`tether.backend.Backend`;
- :mod:`tether.acp.models` — the ACP messages tether reads and writes;
- :mod:`tether.acp.updates`, :mod:`tether.acp.tool_calls` — kernel events and stored history as
  ``session/update``\\ s (titles, kinds, locations, diffs);
- :mod:`tether.acp.content`, :mod:`tether.acp.servers` — prompt blocks and MCP server entries;
- :mod:`tether.acp.permission`, :mod:`tether.acp.modes` — asking the user, session modes;
- :mod:`tether.acp.editor_files` — ``read_file`` through the editor's ``fs/read_text_file``;
- :mod:`tether.acp.stdio` — the process: stdin, stdout (protocol lines only), the exit.

Nothing below this package imports it, and it does not import :mod:`tether.rpc`.
"""
