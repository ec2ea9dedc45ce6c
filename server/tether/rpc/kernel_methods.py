"""The ``kernel/*`` request methods. Imported after the handshake: they pull in the kernel."""

from __future__ import annotations

from tether.kernel.kernel import Kernel
from tether.protocol.commands import CommandsParams
from tether.protocol.kernel import (
    CancelParams,
    CancelResult,
    CompactParams,
    CompactResult,
    RunParams,
    RunResult,
)
from tether.rpc.handlers import Handler, handler
from tether.rpc.progress import Notify, WorkDoneProgress, progress_emitter
from tether.sessions import SessionService


def kernel_methods(
    kernel: Kernel,
    sessions: SessionService,
    notify: Notify,
    run_tokens: dict[str | int, str] | None = None,
) -> dict[str, Handler]:
    """``run_tokens`` maps each running run's work-done token to its session, so that
    ``window/workDoneProgress/cancel`` can stop it."""
    tokens = {} if run_tokens is None else run_tokens

    async def run(params: RunParams) -> RunResult:
        token = params.work_done_token
        if token is not None:
            tokens[token] = params.session_id
        try:
            return await kernel.run(params, progress_emitter(notify, token))
        finally:
            if token is not None and tokens.get(token) == params.session_id:
                del tokens[token]

    async def cancel(params: CancelParams) -> CancelResult:
        await sessions.store.get(params.session_id)  # an unknown session is -32010
        return CancelResult(cancelled=await kernel.stop(params.session_id))

    async def compact(params: CompactParams) -> CompactResult:
        token = params.work_done_token
        progress = WorkDoneProgress()
        if token is not None:
            notify("$/progress", {"token": token, "value": progress.begin("compacting")})
        try:
            return await kernel.compact(params, progress_emitter(notify, token, progress))
        finally:
            if token is not None:
                notify("$/progress", {"token": token, "value": progress.end()})

    return {
        "kernel/run": handler(RunParams, run),
        "kernel/cancel": handler(CancelParams, cancel),
        "session/compact": handler(CompactParams, compact),
        "session/commands": handler(CommandsParams, kernel.commands),
    }
