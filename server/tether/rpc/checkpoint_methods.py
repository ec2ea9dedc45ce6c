"""``session/checkpoints``, ``session/rewind`` and ``session/fork`` (which restores the files
with ``restoreFiles``). The checkpoint service is made on the first of them (it imports a part
of the kernel), not while the server starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tether.protocol import ForkSessionParams, Session
from tether.protocol.checkpoints import (
    CheckpointsParams,
    CheckpointsResult,
    RewindParams,
    RewindResult,
)
from tether.rpc.handlers import Handler, LimitsOf, handler
from tether.sessions import SessionService

if TYPE_CHECKING:
    from tether.kernel.checkpoints import Checkpoints


def checkpoint_methods(
    checkpoints: Callable[[], Checkpoints], sessions: SessionService, limits: LimitsOf
) -> dict[str, Handler]:
    async def list_checkpoints(params: CheckpointsParams) -> CheckpointsResult:
        return await checkpoints().list_checkpoints(params)

    async def rewind(params: RewindParams) -> RewindResult:
        return await checkpoints().rewind(params)

    async def fork(params: ForkSessionParams) -> Session:
        if params.restore_files:
            return await checkpoints().fork(params)
        return await sessions.fork(params)

    return {
        "session/checkpoints": handler(CheckpointsParams, list_checkpoints, limits),
        "session/rewind": handler(RewindParams, rewind, limits),
        "session/fork": handler(ForkSessionParams, fork, limits),
    }
