# mindspore_serving/server/__init__.py — MindSpore Serving's server API: the register API and starting `cairn serve`.
"""MindSpore Serving's server API on cairn.

`register` is the API a servable_config.py uses (mindspore_serving/server/
register). ServableStartConfig, start_servables, start_grpc_server,
start_restful_server and stop keep MindSpore's signatures and run the cairn
binary (see _launcher.py for what differs).
"""

import importlib.util as _importlib_util

# The register package comes with cairn's embedded runtime (helper "py"); until
# it is there, the start API works on its own.
if _importlib_util.find_spec(__name__ + ".register") is not None:
    from . import register  # noqa: F401

from ._launcher import (SSLConfig, ServableStartConfig, build_command, command_line,
                        find_binary, start_grpc_server, start_restful_server, start_servables,
                        stop)

__all__ = ["start_grpc_server", "start_restful_server", "stop", "start_servables",
           "ServableStartConfig", "SSLConfig", "command_line", "build_command", "find_binary"]
