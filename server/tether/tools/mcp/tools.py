"""MCP tools as tether tools: their names, kinds and specs, and their results as text."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import mcp_types as types

from tether.protocol.limits import MAX_JSON_DEPTH, nested_deeper_than
from tether.protocol.tools import ToolKind, ToolSpec
from tether.tools.base import PromptArgument, SourcePrompt, ToolResult
from tether.tools.run_command import CappedOutput
from tether.tools.sandbox import format_size

logger = logging.getLogger(__name__)

MAX_NAME = 64
MAX_RESULT_BYTES = 64 * 1024  # of a result's text, as the model reads it
MAX_DESCRIPTION_CHARS = 4096  # of a tool's description, as the model reads it
MAX_SCHEMA_BYTES = 64 * 1024  # of a tool's input schema (as JSON): a larger one is refused
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str, taken: Collection[str] = ()) -> str:
    """``server__tool`` with every character a ToolSpec name refuses replaced by ``_``, cut to
    64 characters, and made unique among ``taken`` with a ``_2``, ``_3``… suffix."""
    base = _UNSAFE.sub("_", f"{server}__{tool}")[:MAX_NAME]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name = base[: MAX_NAME - len(suffix)] + suffix
        n += 1
    return name


def tool_kind(tool: types.Tool) -> ToolKind:
    """``read`` for a tool that declares itself read-only, else ``execute``.

    A tool of another process may do anything it does not disclaim (MCP's own defaults take an
    unannotated tool as destructive), so every other MCP tool needs approval like ``run_command``.
    """
    hints = tool.annotations
    if hints is not None and hints.read_only_hint:
        return ToolKind.READ
    return ToolKind.EXECUTE


def trim_tool(server: str, tool: types.Tool) -> types.Tool | None:
    """``tool`` as tether keeps it: its description cut at :data:`MAX_DESCRIPTION_CHARS`, its
    output schema (unused) left out; ``None``, logged, when its input schema is over
    :data:`MAX_SCHEMA_BYTES`. So what a server's listing leaves in memory is bounded per tool."""
    schema = tool.input_schema or {"type": "object"}
    size = len(json.dumps(schema, ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        logger.warning(
            "MCP server %s: skipping tool %r (its input schema is %s, over the limit of %s)",
            server,
            tool.name[:64],
            format_size(size),
            format_size(MAX_SCHEMA_BYTES),
        )
        return None
    description = tool.description
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        description = description[:MAX_DESCRIPTION_CHARS] + "… [description cut]"
    title = tool.title[:MAX_DESCRIPTION_CHARS] if tool.title else tool.title
    update = {"description": description, "title": title, "output_schema": None}
    return tool.model_copy(update=update)


def tool_spec(name: str, server: str, tool: types.Tool) -> ToolSpec:
    """The spec the model sees: the server's description and input schema."""
    description = tool.description or tool.title or f"{tool.name} (from MCP server {server})"
    parameters: dict[str, Any] = dict(tool.input_schema or {"type": "object"})
    return ToolSpec(name=name, description=description, parameters=parameters, kind=tool_kind(tool))


def render_result(result: types.CallToolResult) -> ToolResult:
    """The result as the model reads it: text blocks as they are, other content described;
    over :data:`MAX_RESULT_BYTES`, the first and last halves are kept with a note of the cut."""
    parts = [_render(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_BYTES // 4:  # else it cannot be over the cap, even in UTF-8
        capped = CappedOutput(MAX_RESULT_BYTES)
        capped.add(text.encode(errors="surrogatepass"))
        text = capped.text()
    if result.is_error:
        return ToolResult(text or "the tool reported an error", is_error=True)
    return ToolResult(text, output=_structured(result.structured_content))


def _structured(content: dict[str, Any] | None) -> dict[str, Any] | None:
    """``structuredContent``, kept as the result's ``output`` when it is within
    :data:`MAX_RESULT_BYTES` as JSON, and nests no deeper than a session keeps (``maxJsonDepth``;
    the text carries it otherwise, cut)."""
    if content is None or nested_deeper_than(content, MAX_JSON_DEPTH):
        return None
    try:
        size = len(json.dumps(content, ensure_ascii=False).encode(errors="surrogatepass"))
    except (TypeError, ValueError):
        return None
    return content if size <= MAX_RESULT_BYTES else None


def _render(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}]"
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    return f"[resource {resource.uri} ({resource.mime_type or 'binary'})]"


PROMPT_PREFIX = "mcp"


def prompt_command(
    server: str,
    prompt: types.Prompt,
    render: Callable[[Mapping[str, str]], Awaitable[str]],
) -> SourcePrompt:
    """A server's prompt as the slash command ``/mcp__server__prompt`` (as Claude Code names
    them; characters a command name cannot hold become ``_``)."""
    name = _UNSAFE.sub("_", f"{PROMPT_PREFIX}__{server}__{prompt.name}")
    description = (prompt.description or prompt.title or "")[:MAX_DESCRIPTION_CHARS]
    arguments = tuple(
        PromptArgument(
            name=argument.name,
            description=(argument.description or "")[:MAX_DESCRIPTION_CHARS],
            required=bool(argument.required),
        )
        for argument in prompt.arguments or ()
    )
    return SourcePrompt(name=name, description=description, arguments=arguments, render=render)


def prompt_text(result: types.GetPromptResult) -> str:
    """A prompt's messages as the text of one user message: each message's content as the model
    reads a tool result's, a message of another role than the user's marked with it."""
    parts: list[str] = []
    for message in result.messages:
        text = _render(message.content)
        parts.append(text if message.role == "user" else f"[{message.role}] {text}")
    return _capped("\n\n".join(parts))


def resource_text(result: types.ReadResourceResult) -> str:
    """A resource's contents as text: text contents as they are, binary ones described."""
    parts = [
        content.text
        if isinstance(content, types.TextResourceContents)
        else f"[resource {content.uri} ({content.mime_type or 'binary'}), "
        f"{len(content.blob) * 3 // 4} bytes]"
        for content in result.contents
    ]
    return _capped("\n".join(parts))


def _capped(text: str) -> str:
    """``text`` within :data:`MAX_RESULT_BYTES` (the first and last halves, the cut noted)."""
    if len(text) <= MAX_RESULT_BYTES // 4:
        return text
    capped = CappedOutput(MAX_RESULT_BYTES)
    capped.add(text.encode(errors="surrogatepass"))
    return capped.text()
