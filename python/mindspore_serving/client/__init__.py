# mindspore_serving/client/__init__.py — MindSpore Serving's client API, served by cairn's client.
"""MindSpore Serving's client API: `Client` and `SSLConfig` are cairn's
(cairn/client.py), which keep MindSpore's signatures and result shapes."""

from cairn.client import Client, SSLConfig

__all__ = ["Client", "SSLConfig"]
