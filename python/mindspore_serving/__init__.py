# mindspore_serving/__init__.py — MindSpore Serving's package name, so its scripts run on cairn unchanged.
"""MindSpore Serving's package name over cairn: mindspore_serving.client and
mindspore_serving.server (with its register API)."""
