"""Clients of a tether server: a raw JSON-RPC connection over a spawned process's stdio."""

from tether.client.connection import Connection, RpcError

__all__ = ["Connection", "RpcError"]
