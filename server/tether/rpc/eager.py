"""Coroutines started eagerly: moved to :mod:`tether.jsonrpc.eager`, shared by both faces."""

from tether.jsonrpc.eager import Finished, Resume, start

__all__ = ["Finished", "Resume", "start"]
