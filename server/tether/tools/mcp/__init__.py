"""MCP servers as tool sources (through the official ``mcp`` SDK, imported when a server starts)."""

from tether.tools.mcp.manager import McpExecutor, McpManager, McpServer, McpTool

__all__ = ["McpExecutor", "McpManager", "McpServer", "McpTool"]
