"""An ACP agent built on the official Python SDK (``agent-client-protocol``) that answers
``initialize`` and ``session/new`` and echoes a prompt back: the peer of ``acp_bench.py``."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from acp import PROTOCOL_VERSION, run_agent, text_block, update_agent_message
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
)


class EchoAgent:
    def __init__(self) -> None:
        self._client: Client | None = None

    def on_connect(self, client: Client) -> None:
        self._client = client

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="echo", version="1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=str(uuid.uuid4()))

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        if self._client is not None:
            for block in prompt:
                text = getattr(block, "text", "")
                await self._client.session_update(
                    session_id=session_id, update=update_agent_message(text_block(text))
                )
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None


if __name__ == "__main__":
    asyncio.run(run_agent(EchoAgent()))  # type: ignore[arg-type]
