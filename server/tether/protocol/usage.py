"""Token usage: counted by runs (:mod:`tether.protocol.kernel`) and kept on sessions, which
import it from here so that the session models do not load the kernel's."""

from __future__ import annotations

from tether.protocol.base import WireModel


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
