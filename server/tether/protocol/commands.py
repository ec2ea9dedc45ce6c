"""``session/commands``: the slash commands a session's prompts may start with."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from tether.protocol.base import Params, WireModel
from tether.protocol.kernel import RunWarning

CommandSource = Literal["builtin", "user", "workspace", "mcp"]

COMMAND_KEY = "command"
"""The ``metadata`` key of a user message a custom command wrote: ``{name, arguments, source}``
(the message's content is the command's expanded text, which the model read)."""


class CommandsParams(Params):
    session_id: str = Field(min_length=1)


class CommandInfo(WireModel):
    model_config = ConfigDict(**WireModel.model_config, frozen=True)  # hashable, shared

    name: str = Field(
        description="typed after `/`; a nested file's is `dir:name`, an MCP prompt's "
        "`mcp__server__prompt`"
    )
    description: str = ""
    argument_hint: str | None = Field(
        default=None, description="what to type after the name, e.g. `<file> [focus]`"
    )
    source: CommandSource


class CommandsResult(WireModel):
    commands: list[CommandInfo]
    warnings: list[RunWarning] | None = Field(
        default=None, description="command files left out (unreadable, too large, bad front matter)"
    )
