"""What the command wrapper's modules share: the C library through ``ctypes``, raw system calls,
``prctl``, and the one comparison of paths they make.

:mod:`tether.tools.landlock`, :mod:`tether.tools.namespaces`, :mod:`tether.tools.seccomp` and
:mod:`tether.tools.wrapper` call the kernel through these helpers. ``ctypes`` is imported on the
first call, not with the module, so tether imports :func:`within` without it. Part of the
wrapper: standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not imported from typing: the wrapper imports nothing it need not
if TYPE_CHECKING:
    import ctypes

_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    """The C library of this process (loaded once), with errno kept for :func:`check`, and the
    prototypes of the functions the wrapper calls with more than plain ``int`` arguments."""
    global _libc
    if _libc is None:
        import ctypes

        library = ctypes.CDLL(None, use_errno=True)
        library.syscall.restype = ctypes.c_long
        library.prctl.restype = ctypes.c_int
        library.prctl.argtypes = (ctypes.c_int, *[ctypes.c_ulong] * 4)
        library.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.c_ulong, ctypes.c_void_p)  # fmt: skip
        _libc = library
    return _libc


def syscall(number: int, *args: object) -> int:
    """System call ``number``; every ``int`` argument is passed as a full machine word (a C
    ``long``), anything else (a pointer, ``None``, ``bytes``) as ``ctypes`` passes it. Returns
    the raw result: negative on failure (see :func:`check`)."""
    import ctypes

    words = [ctypes.c_long(arg) if isinstance(arg, int) else arg for arg in args]
    return int(libc().syscall(ctypes.c_long(number), *words))


def check(result: int, what: str, error: type[OSError] = OSError) -> int:
    """``result`` of a C call, or ``error`` (errno and ``what: reason``) when it is negative."""
    if result < 0:
        import ctypes

        number = ctypes.get_errno()
        raise error(number, f"{what}: {os.strerror(number)}")
    return result


def prctl(option: int, value: int, what: str, error: type[OSError] = OSError) -> None:
    """``prctl(option, value, 0, 0, 0)``; ``error`` when it fails."""
    check(libc().prctl(option, value, 0, 0, 0), f"prctl({what})", error)


def within(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or lies below it, by their (normalized) names alone:
    the callers pass real paths, so no symbolic link is left to change the answer."""
    path, directory = os.path.normpath(path), os.path.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")
