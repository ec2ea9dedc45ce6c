"""tether: an agent backend that editors talk to the way they talk to a language server."""

__version__ = "0.1.0"
