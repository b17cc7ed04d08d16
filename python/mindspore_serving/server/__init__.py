# mindspore_serving/server/__init__.py — MindSpore Serving's server API: the register API and starting `cairn serve`.
"""MindSpore Serving's server API on cairn.

`register` is the API a servable_config.py uses (mindspore_serving/server/
register). ServableStartConfig, start_servables, start_grpc_server,
start_restful_server and stop keep MindSpore's signatures and run the cairn
binary (see _launcher.py for what differs).
"""

from . import register  # noqa: F401
from . import distributed  # noqa: F401

from ._launcher import (SSLConfig, ServableStartConfig, build_command, command_line,
                        find_binary, start_grpc_server, start_restful_server, start_servables,
                        stop)

__all__ = ["start_grpc_server", "start_restful_server", "stop", "start_servables",
           "ServableStartConfig", "SSLConfig", "command_line", "build_command", "find_binary"]
