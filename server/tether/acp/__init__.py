"""The Agent Client Protocol face: ``tether acp`` serves ACP v1 (JSON-RPC 2.0 as newline-delimited
JSON on stdio) from the same session service and kernel as ``tether serve``.

- :mod:`tether.acp.wire` — the NDJSON JSON-RPC connection;
- :mod:`tether.acp.agent` — the ACP methods, translated onto :class:`tether.backend.Backend`;
- :mod:`tether.acp.updates` — kernel events and stored history as ``session/update``\\ s;
- :mod:`tether.acp.permission`, :mod:`tether.acp.modes` — asking the user, session modes;
- :mod:`tether.acp.stdio` — the process: stdin, stdout (frames only), the exit.
"""
