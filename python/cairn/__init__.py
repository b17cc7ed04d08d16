"""cairn — Python side of the cairn model server.

Holds the servable `register` API (cairn.server.register, run by the server's
embedded interpreter) and the gRPC client (cairn.client). Imports nothing
heavy here: the server imports this package inside its own process, where
grpc need not be installed, so `cairn.Client` is loaded only when asked for.
"""


def __getattr__(name):
    if name == "Client":
        from cairn.client import Client  # noqa: PLC0415 — lazy on purpose
        return Client
    raise AttributeError(f"module 'cairn' has no attribute '{name}'")
