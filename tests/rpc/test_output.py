"""The transport's output: held back while the client is not reading, never copied whole."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.rpc.transport import _Output


class SlowPipe(asyncio.WriteTransport):
    """A transport that backs up once it holds ``high`` bytes, until ``drain`` is called."""

    def __init__(self, high: int) -> None:
        super().__init__()
        self.high = high
        self.buffered = 0
        self.written = bytearray()
        self.largest_write = 0
        self.protocol: Any = None

    def write(self, data: Any) -> None:
        self.written += data
        self.largest_write = max(self.largest_write, len(data))
        self.buffered += len(data)
        if self.buffered >= self.high:
            self.protocol.pause_writing()

    def drain(self) -> None:
        self.buffered = 0
        self.protocol.resume_writing()

    def is_closing(self) -> bool:
        return False


def output(high: int) -> tuple[_Output, SlowPipe, list[bool]]:
    pipe = SlowPipe(high)
    out = _Output(pipe)
    pipe.protocol = out
    events: list[bool] = []
    out.backed_up = events.append
    return out, pipe, events


async def test_a_big_frame_is_handed_on_a_slice_at_a_time_as_the_transport_drains():
    out, pipe, events = output(high=_Output.SLICE)
    frame = bytes(range(256)) * (5 * _Output.SLICE // 256)
    out.write(frame)
    out.write(b"next")
    assert events == [True] and len(pipe.written) == _Output.SLICE
    while events[-1]:
        pipe.drain()
    assert bytes(pipe.written) == frame + b"next"
    assert pipe.largest_write <= _Output.SLICE


async def test_reading_is_paused_while_the_output_backs_up_and_resumed_once_it_drains():
    out, pipe, events = output(high=100)
    for n in range(10):
        out.write(b"%02d" % n * 30)
    assert events == [True]  # the server stops reading requests
    while events[-1]:
        pipe.drain()
    assert events[-1] is False  # and reads again once everything went out
    assert bytes(pipe.written) == b"".join(b"%02d" % n * 30 for n in range(10))
    await asyncio.wait_for(out.flushed(), 1)


async def test_parts_are_made_only_as_the_transport_takes_them_and_stay_in_order():
    out, pipe, events = output(high=100)
    made: list[int] = []

    def parts():
        for n in range(5):
            made.append(n)
            yield bytes([n]) * 100

    out.write(b"head")
    out.write_parts(parts())
    out.write(b"after")
    assert made == [0]  # the transport backed up on the first part: nothing more is made
    while events[-1]:
        pipe.drain()
        assert len(made) <= 5
    assert bytes(pipe.written) == b"head" + b"".join(bytes([n]) * 100 for n in range(5)) + b"after"
    assert made == [0, 1, 2, 3, 4]


async def test_the_input_is_read_in_pieces_under_the_mmap_threshold():
    """A read asks READ_SIZE bytes, not asyncio's 256 KB: a buffer that big is mmapped for every
    read, however little it brings. The pipe here holds 1 MB, so a read could bring more."""
    import fcntl
    import os

    from tether.rpc.app import App
    from tether.rpc.transport import READ_SIZE, _connect_reader
    from tether.rpc.wire import Wire

    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, 1031, 1024 * 1024)  # F_SETPIPE_SZ
    payload = b"Content-Length: 300000\r\n\r\n" + b" " * 300_000
    os.write(write_fd, payload)  # all of it waits in the pipe before the first read
    os.close(write_fd)
    wire = Wire(App())
    pieces: list[int] = []
    wire.data_received = lambda data: pieces.append(len(data))  # type: ignore[method-assign]
    stop = await _connect_reader(asyncio.get_running_loop(), wire, read_fd, None)
    try:
        async with asyncio.timeout(5):
            await wire.stopped.wait()  # the end of the input (connection_lost)
    finally:
        stop()
    assert sum(pieces) == len(payload)
    assert max(pieces) == READ_SIZE < 128 * 1024
