"""A config that fails to load: the other servables must keep serving."""
from mindspore_serving.server import register

raise RuntimeError("this servable is broken on purpose")
