"""A real MCP server written with the ``mcp`` SDK, for the tests of MCP tool sources.

Run it as ``python tests/fakes/mcp_server.py [--http PORT]`` (stdio by default). Tools:

- ``echo`` (read-only): returns its ``text``;
- ``count``: reports progress ``steps`` times, then says how many;
- ``fail``: answers with an ``isError`` result;
- ``slow``: writes ``started`` to the file named by ``TETHER_MCP_MARKER``, waits until it is
  cancelled, then writes ``cancelled`` there;
- ``crash`` (destructive): ends the process at once (``os._exit``);
- ``grow``: adds the tool ``grown`` (which says ``grown``) and tells the client
  (``notifications/tools/list_changed``).

Prompts: ``review(path, focus="bugs")`` (a user message asking to review ``path``) and
``greet()`` (no arguments). Resources: ``notes://today`` (text) and ``notes://logo`` (binary).

On start it appends its pid to the file named by ``TETHER_MCP_PIDS``, when that is set, and with
``TETHER_MCP_DETACH=SECONDS`` starts a process that tries to outlive it: in a session of its own,
ignoring ``SIGTERM``, sleeping ``SECONDS`` (tests find it by that argument).
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import AssistantMessage, UserMessage
from mcp.types import ToolAnnotations

server = MCPServer("fake")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say the text back."""
    print(f"echo called with {text!r}", file=sys.stderr)  # must not reach tether's stdout
    return text


@server.tool()
async def count(steps: int, ctx: Context) -> str:
    """Count to steps, reporting progress on the way."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"counted to {steps}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ToolError(f"failed on purpose: {reason}")


@server.tool()
async def slow() -> str:
    """Waits until cancelled."""
    marker = os.environ.get("TETHER_MCP_MARKER")
    if marker:
        await anyio.Path(marker).write_text("started")
    try:
        await anyio.sleep_forever()
    finally:
        if marker:
            with anyio.CancelScope(shield=True):
                await anyio.Path(marker).write_text("cancelled")
    return "never"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def crash() -> str:
    """Ends the server process."""
    os._exit(3)


def grown() -> str:
    """Added by grow."""
    return "grown"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool grown, and says so to the client."""
    server.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "grew a tool"


@server.prompt(description="Review a file")
def review(path: str, focus: str = "bugs") -> list[UserMessage | AssistantMessage]:
    return [
        UserMessage(f"Review {path}, looking for {focus}."),
        AssistantMessage("I will read it first."),
    ]


@server.prompt()
def greet() -> str:
    """Say hello."""
    return "Hello from the prompt."


@server.resource("notes://today", mime_type="text/plain", description="Today's notes")
def today() -> str:
    return "Ship on Friday."


@server.resource("notes://logo", mime_type="image/png")
def logo() -> bytes:
    return b"\x89PNG fake"


DETACHED = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "time.sleep(float(sys.argv[1]))"
)


def main() -> None:
    pids = os.environ.get("TETHER_MCP_PIDS")
    if pids:
        with open(pids, "a") as file:
            file.write(f"{os.getpid()}\n")
    seconds = os.environ.get("TETHER_MCP_DETACH")
    if seconds:
        subprocess.Popen(
            [sys.executable, "-c", DETACHED, seconds],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main()
