"""The seccomp filter that keeps a command off the network.

Landlock (ABI 4 and later) refuses TCP ``connect`` and ``bind``, but not a connection opened by
``sendto`` with ``MSG_FASTOPEN``, nor ``listen`` on an unbound socket (which binds a free port
of every address), nor UDP, raw sockets, unix sockets reached by a path (an SSH agent's, a
container engine's, a desktop bus) or other families. Under "no network" the command wrapper
(:mod:`tether.tools.wrapper`) therefore installs this filter just before the command is
``exec``\\ ed. It answers ``EACCES`` to ``socket()`` of every family but ``AF_NETLINK`` (which
talks to the kernel only: ``getifaddrs``, ``ip``): no ``AF_INET`` or ``AF_INET6`` socket of any
type, no ``AF_UNIX`` socket (``socketpair()`` stays allowed: it makes a connected pair, the pipes
between a program's own processes). It answers ``ENOSYS`` to ``io_uring_setup`` (io_uring can
open and connect sockets without a system call the filter sees), so programs fall back to plain
system calls. The 32-bit system calls a 64-bit process may still make (``int 0x80`` on x86_64,
AArch32 on arm64) are filtered the same way, ``socketcall`` refused whole; x32 system calls are
those of x86_64 with bit 30 set. On other architectures no filter is installed
(:func:`supported` is False) and the sandbox says so.

The filter is inherited across ``fork`` and ``exec`` and cannot be removed. Part of the wrapper:
standard library only.
"""

from __future__ import annotations

import ctypes
import os

from tether.tools.linux import check, libc

TYPE_CHECKING = False  # not imported from typing: the wrapper imports nothing it need not
if TYPE_CHECKING:
    from collections.abc import Sequence

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EACCES = 13
ENOSYS = 38

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028
X32_BIT = 0x40000000

AF_NETLINK = 16

# struct seccomp_data: nr (int), arch (u32), instruction_pointer (u64), args (u64[6]). The
# architectures filtered are little-endian: the low half of an argument comes first.
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARGS = 16

# Classic BPF opcodes (linux/filter.h).
LD_W_ABS = 0x20
JEQ_K = 0x15
RET_K = 0x06

# Per audit architecture: (socket, socketcall, io_uring_setup); None where there is none.
SYSCALLS: dict[int, tuple[int, int | None, int]] = {
    AUDIT_ARCH_X86_64: (41, None, 425),
    AUDIT_ARCH_I386: (359, 102, 425),
    AUDIT_ARCH_AARCH64: (198, None, 425),
    AUDIT_ARCH_ARM: (281, None, 425),
}
NATIVE = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
COMPAT = {AUDIT_ARCH_X86_64: AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64: AUDIT_ARCH_ARM}


class SockFilter(ctypes.Structure):
    """``struct sock_filter``: one classic BPF instruction."""

    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class SockFprog(ctypes.Structure):
    """``struct sock_fprog``: a BPF program."""

    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter)))


class SeccompError(OSError):
    """The filter could not be installed (``errno`` says why)."""


def supported() -> bool:
    """Whether this machine's architecture has a filter here."""
    return os.uname().machine in NATIVE


def network_filter() -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jt, jf, k) for this machine's architecture."""
    native = NATIVE[os.uname().machine]
    program = _Program()
    program.load(OFFSET_ARCH)
    for arch in (native, COMPAT[native]):
        program.jump_if(arch, f"arch-{arch}")
    program.ret(RET_ERRNO | ENOSYS)  # an architecture this kernel does not run: nothing
    for arch in (native, COMPAT[native]):
        _filter_arch(program, arch, x32=arch == AUDIT_ARCH_X86_64)
    _check_socket(program)
    return program.assemble()


def _filter_arch(program: _Program, arch: int, *, x32: bool) -> None:
    socket, socketcall, io_uring_setup = SYSCALLS[arch]
    program.label(f"arch-{arch}")
    program.load(OFFSET_NR)
    for number in (socket, socket | X32_BIT) if x32 else (socket,):
        program.jump_if(number, "socket")
    for number in (io_uring_setup, io_uring_setup | X32_BIT) if x32 else (io_uring_setup,):
        program.jump_if(number, "enosys")
    if socketcall is not None:
        program.jump_if(socketcall, "eacces")
    program.ret(RET_ALLOW)


def _check_socket(program: _Program) -> None:
    program.label("socket")
    program.load(OFFSET_ARGS)  # the family
    program.jump_unless(AF_NETLINK, "eacces")
    program.ret(RET_ALLOW)
    program.label("eacces")
    program.ret(RET_ERRNO | EACCES)
    program.label("enosys")
    program.ret(RET_ERRNO | ENOSYS)


class _Program:
    """A tiny BPF assembler: instructions whose jumps name labels, resolved by
    :meth:`assemble` (every jump goes forward, as BPF requires)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((LD_W_ABS, None, None, offset))

    def jump_if(self, value: int, target: str) -> None:
        self.code.append((JEQ_K, target, None, value))

    def jump_unless(self, value: int, target: str) -> None:
        self.code.append((JEQ_K, None, target, value))

    def ret(self, value: int) -> None:
        self.code.append((RET_K, None, None, value))

    def assemble(self) -> list[tuple[int, int, int, int]]:
        return [
            (code, self._offset(index, jt), self._offset(index, jf), k)
            for index, (code, jt, jf, k) in enumerate(self.code)
        ]

    def _offset(self, index: int, target: str | None) -> int:
        if target is None:
            return 0
        offset = self.labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"BPF jump to {target} out of range: {offset}")
        return offset


def install(instructions: Sequence[tuple[int, int, int, int]]) -> None:
    """Install the filter on this thread (``no_new_privs`` must be set already)."""
    array = (SockFilter * len(instructions))(*(SockFilter(*row) for row in instructions))
    program = SockFprog(len(instructions), array)
    pointer = ctypes.addressof(program)  # prctl's third argument, passed as a word
    check(libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, pointer, 0, 0), "seccomp", SeccompError)
