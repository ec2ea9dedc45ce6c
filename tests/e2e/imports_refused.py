"""``tether serve`` in a process where importing the packages named in ``argv[1]`` (comma
separated: top-level packages, or modules by their full name) fails, as if they were not
installed; the rest of ``argv`` goes to ``serve``.

Whatever a client gets answered from such a server did not import them.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class RefusingFinder(importlib.abc.MetaPathFinder):
    def __init__(self, refused: set[str]) -> None:
        self.refused = refused

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname in self.refused or fullname.partition(".")[0] in self.refused:
            raise ImportError(f"imports_refused: {fullname} may not be imported here")
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, RefusingFinder(set(sys.argv[1].split(","))))
    from tether.cli import main

    sys.exit(main(["serve", *sys.argv[2:]]))
