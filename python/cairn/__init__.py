# cairn/__init__.py — the cairn Python package; imports nothing heavy until a name is used.
"""cairn's Python package.

`cairn.Client` (the Serving gRPC client, cairn/client.py) is imported on first
use, so `import cairn` stays cheap and needs neither grpc nor numpy.
"""


def __getattr__(name):
    if name in ("Client", "SSLConfig"):
        from . import client

        return getattr(client, name)
    raise AttributeError("module 'cairn' has no attribute %r" % name)
