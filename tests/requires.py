"""What the sandbox tests need of the system, and what happens when it is missing.

Where the kernel has no Landlock, refuses mount and pid namespaces, or has no seccomp filter for
its architecture, the tests that need it are skipped: a developer's machine may lack them. CI
sets ``TETHER_REQUIRE_SANDBOX=1`` (``.ci/run``, for its root and unprivileged runs alike): there
a missing mechanism fails those tests instead, so that a machine that lost one cannot pass the
suite by skipping what it no longer tests.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from tether.tools.confinement import NAMESPACES_VARIABLE, isolation, landlock_abi

REQUIRE_VARIABLE = "TETHER_REQUIRE_SANDBOX"


def missing(reason: str) -> NoReturn:
    """Skip the test for ``reason``, or fail it where the sandbox is required."""
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_VARIABLE}=1, but {reason}")
    pytest.skip(reason)


def need_landlock() -> None:
    if landlock_abi() == 0:
        missing("the kernel has no Landlock")


def need_namespaces() -> None:
    """Mount and pid namespaces, as :func:`isolation` finds them (with the environment of the
    moment: ``TETHER_SANDBOX_NAMESPACES=0`` turns them off on purpose, and is no failure)."""
    need_landlock()
    if os.environ.get(NAMESPACES_VARIABLE) == "0":
        pytest.skip(f"{NAMESPACES_VARIABLE}=0")
    if not isolation().namespaces:
        missing("this system refuses mount and pid namespaces")


def need_seccomp() -> None:
    need_landlock()
    if not isolation().seccomp:
        missing("no seccomp network filter on this system")
