"""The hooks of a face that runs turns of its own: given to the App, never set on it."""

from __future__ import annotations

import pytest

from tether.rpc.app import App, FaceHooks

from .conftest import Peer


async def test_a_face_given_as_the_app_is_made_is_stopped_as_the_app_closes() -> None:
    stopped: list[str] = []

    async def stop() -> None:
        stopped.append("face")

    app = App(face=FaceHooks(stop=stop, trace=lambda: "verbose"))
    assert app.trace() == "verbose"
    await app.aclose()
    assert stopped == ["face"]


async def test_an_app_without_a_face_traces_nothing_and_closes() -> None:
    app = App()
    assert app.trace() == "off"
    await app.aclose()


async def test_the_lsp_face_attaches_once_and_a_second_face_is_refused() -> None:
    peer = Peer()  # builds the LSP face (pygls) on the wire, which attaches its hooks
    app = peer.wire._app
    with pytest.raises(RuntimeError, match="already has a face"):
        app.attach_face(FaceHooks())
    await app.aclose()
