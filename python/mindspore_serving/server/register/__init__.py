"""mindspore_serving.server.register — MindSpore Serving's name for cairn's register API.

Existing servable_config.py files say `from mindspore_serving.server import
register`; everything comes from cairn.server.register, so both names record
into the same loading servable.
"""
from cairn.server.register import *  # noqa: F401,F403
from cairn.server.register import __all__  # noqa: F401
