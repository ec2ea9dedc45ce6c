"""Session modes: how much a turn may do without asking.

- ``ask`` (the default): tools that edit or execute follow ``tools.approval`` (under ``ask``,
  the user is asked through ``session/request_permission``);
- ``accept_edits``: file edits run without asking; commands are still asked about;
- ``read_only``: the model is offered only the built-in tools that read and search.

A mode only narrows what the configuration allows: under ``tools.approval = "deny"`` no mode
lets an edit run. Modes are kept in memory for the life of the process.
"""

from __future__ import annotations

from tether.acp.models import SessionMode, SessionModeState

DEFAULT = "ask"
ACCEPT_EDITS = "accept_edits"
READ_ONLY = "read_only"
MODES = {
    DEFAULT: ("Ask", "Ask before edits and commands"),
    ACCEPT_EDITS: ("Accept edits", "Edit files without asking"),
    READ_ONLY: ("Read only", "Only read and search the workspace"),
}
MODE_IDS = frozenset(MODES)
READ_ONLY_TOOLS = ("read_file", "list_files", "search_text")


def mode_state(current: str) -> SessionModeState:
    """The modes as ``session/new`` and ``session/load`` report them (built on first use: a
    model instance at import would cost the handshake its schema)."""
    return SessionModeState(
        current_mode_id=current,
        available_modes=[
            SessionMode(id=mode_id, name=name, description=description)
            for mode_id, (name, description) in MODES.items()
        ],
    )


def run_tools(mode: str, session_tools: list[str] | None) -> list[str] | None:
    """The run's allow-list of tools in ``mode`` (None: no limit of the mode's own)."""
    if mode != READ_ONLY:
        return None
    return [name for name in READ_ONLY_TOOLS if session_tools is None or name in session_tools]
