"""The JSON-RPC server: the wire (pygls-free), the pygls protocol and server, the transports."""
