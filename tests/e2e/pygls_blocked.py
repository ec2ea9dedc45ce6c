"""``tether serve`` in a process where importing pygls or lsprotocol never finishes.

Run as a script: every import of a module of those packages blocks its thread for good, as if
their import were still running, and the server is then started as ``python -m tether serve``
starts it. Whatever a client gets answered from such a server needed neither package.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

BLOCKED = ("pygls", "lsprotocol")
_never = threading.Event()


class BlockingFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname.partition(".")[0] in BLOCKED:
            print(f"pygls_blocked: import of {fullname} held", file=sys.stderr, flush=True)
            _never.wait()
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, BlockingFinder())
    from tether.cli import main

    sys.exit(main(["serve", *sys.argv[1:]]))
