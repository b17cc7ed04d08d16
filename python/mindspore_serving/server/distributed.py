# mindspore_serving/server/distributed.py — MindSpore Serving's distributed API on cairn.
"""Distributed servables: one model cut over rank_size agents.

declare_servable() goes in servable_config.py (the model of add_stage());
start_servable() starts the distributed worker (`cairn serve` with
--distributed-address) as start_servables() starts an ordinary one;
startup_agents() starts one `cairn agent` per model file on this host and
waits for them. Model files are ONNX graphs, one per rank (rank r's is
model_files[r - rank_start]), whose cairn.AllGather / AllReduce / Broadcast
nodes join the shards of a stage, or, for an LLM, the one GGUF file named
once per rank. group_config_files, rank tables, devices
and decryption keys do not apply: cairn's agents form their groups with gloo
through the worker.
"""

import logging
import os
import signal
import subprocess
import sys

from cairn.server.register import declare_distributed

from . import _launcher

__all__ = ["declare_servable", "start_servable", "startup_agents"]

_log = logging.getLogger("mindspore_serving")


def declare_servable(rank_size, stage_size, with_batch_dim=True, without_batch_dim_inputs=None,
                     enable_pipeline_infer=False, model_file=None, options=None):
    """The servable's model, cut over rank_size agents in stage_size stages.
    model_file and options (cairn's additions): a GGUF LLM every agent maps,
    each computing its tensor-parallel slice of its stage's layers, and the
    settings declare_model takes (an LLM's sampling defaults)."""
    if enable_pipeline_infer:
        _log.warning("declare_servable: enable_pipeline_infer is ignored (cairn runs one forward "
                     "at a time over the stages)")
    return declare_distributed(rank_size, stage_size, with_batch_dim, without_batch_dim_inputs,
                               options=options, model_file=model_file)


@_launcher._stop_on_error
def start_servable(servable_directory, servable_name, rank_table_json_file=None, version_number=1,
                   distributed_address="0.0.0.0:6200", wait_agents_time_in_seconds=0):
    """Records the distributed servable; start_grpc_server / start_restful_server
    then start `cairn serve`, which waits for the agents before it serves."""
    _launcher._check_str("distributed_address", distributed_address)
    _launcher._check_int("wait_agents_time_in_seconds", wait_agents_time_in_seconds, 0)
    if rank_table_json_file is not None:
        _log.info("start_servable: rank table %s is not needed (agents join over gloo)",
                  rank_table_json_file)
    _launcher.start_servables(_launcher.ServableStartConfig(servable_directory, servable_name,
                                                            version_number=0))
    with _launcher._state.lock:
        _launcher._state.distributed = (distributed_address, wait_agents_time_in_seconds)
    del version_number  # cairn serves the newest version


def agent_commands(distributed_address, model_files, rank_start=0, binary=None, agent_ip=None):
    """The `cairn agent` command lines startup_agents runs (one per model file)."""
    binary = binary or _launcher.find_binary()
    cmds = []
    for i, f in enumerate(model_files):
        cmd = [binary, "agent", "--distributed-address", distributed_address,
               "--rank", str(rank_start + i), "--model", os.path.abspath(f)]
        if agent_ip:
            cmd += ["--host", agent_ip]
        cmds.append(cmd)
    return cmds


def startup_agents(distributed_address, model_files, group_config_files=None, agent_start_port=7000,
                   agent_ip=None, rank_start=None, dec_key=None, dec_mode='AES-GCM'):
    """Starts one agent per model file on this host (ranks rank_start, ...) and
    waits until they all exit; SIGINT / SIGTERM stop them."""
    _launcher._check_str("distributed_address", distributed_address)
    if isinstance(model_files, str) or not isinstance(model_files, (list, tuple)) or not model_files:
        raise RuntimeError("Parameter 'model_files' should be a non-empty list or tuple of str")
    for f in model_files:
        _launcher._check_str("model_files", f)
        if not os.path.isfile(f):
            raise RuntimeError("model file %s does not exist" % f)
    del group_config_files, agent_start_port, dec_mode  # gloo forms the groups; ports are chosen freely
    if dec_key is not None:
        _log.warning("startup_agents: dec_key is ignored (cairn loads unencrypted ONNX files)")
    start = 0 if rank_start is None else rank_start
    _launcher._check_int("rank_start", start, 0)
    children = [subprocess.Popen(cmd) for cmd in agent_commands(distributed_address, model_files, start,
                                                                 agent_ip=agent_ip)]

    def stop(signum, frame):  # noqa: ARG001
        for c in children:
            if c.poll() is None:
                c.terminate()

    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes = [c.wait() for c in children]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    failed = [start + i for i, code in enumerate(codes) if code not in (0, -signal.SIGTERM, -signal.SIGINT)]
    if failed:
        print("startup_agents: agents with ranks %s failed" % failed, file=sys.stderr)
    return codes
