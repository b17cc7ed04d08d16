"""cairn.server — what a servable_config.py imports: the `register` API."""
from . import register  # noqa: F401
