#!/usr/bin/python3
"""gRPC helpers for worker_process.test.mjs (node has no gRPC client here).

  worker_harness.py PYDIR controller
      A fake cairn.v1.Controller on a free port. Prints {"port": N} first, then
      one JSON line per call received (register, heartbeat, deregister). Runs
      until stdin closes, so it never outlives the test that started it.
  worker_harness.py PYDIR generate ADDRESS PROMPT MAX_TOKENS
      One Worker.Generate call with a deadline; prints one JSON line per event
      and a last {"status": CODE} line.

PYDIR holds the cairn/v1/*_pb2.py modules the build generates.
"""
import json
import os
import sys
import threading
from concurrent import futures


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def controller(pb):
    import grpc
    ids = {"n": 0}
    known = set()
    lock = threading.Lock()

    def register(req, ctx):
        with lock:
            ids["n"] += 1
            wid = "fake-%d" % ids["n"]
            known.add(wid)
        emit({"event": "register", "id": wid, "name": req.name, "address": req.address,
              "models": [m.id for m in req.status.models], "state": req.status.state})
        return pb.controller_pb2.RegisterResponse(worker_id=wid, heartbeat_ms=0, timeout_ms=0)

    def heartbeat(req, ctx):
        with lock:
            ok = req.worker_id in known
        emit({"event": "heartbeat", "id": req.worker_id, "known": ok,
              "running": req.status.running, "waiting": req.status.waiting,
              "state": req.status.state})
        return pb.controller_pb2.HeartbeatResponse(known=ok)

    def deregister(req, ctx):
        with lock:
            ok = req.worker_id in known
            known.discard(req.worker_id)
        emit({"event": "deregister", "id": req.worker_id, "known": ok})
        return pb.controller_pb2.DeregisterResponse(known=ok)

    c = pb.controller_pb2
    handlers = {
        "Register": grpc.unary_unary_rpc_method_handler(
            register, c.RegisterRequest.FromString, c.RegisterResponse.SerializeToString),
        "Heartbeat": grpc.unary_unary_rpc_method_handler(
            heartbeat, c.HeartbeatRequest.FromString, c.HeartbeatResponse.SerializeToString),
        "Deregister": grpc.unary_unary_rpc_method_handler(
            deregister, c.DeregisterRequest.FromString, c.DeregisterResponse.SerializeToString),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("cairn.v1.Controller", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    if port == 0:
        emit({"error": "cannot bind"})
        return 1
    server.start()
    emit({"port": port})
    sys.stdin.read()  # until the test closes our stdin or kills us
    server.stop(0)
    return 0


def generate(pb, address, prompt, max_tokens):
    import grpc
    w = pb.worker_pb2
    req = w.GenerateRequest(request_id="it-%d" % os.getpid(), text=prompt, max_tokens=max_tokens,
                            ignore_eos=True, top_logprobs=-1)
    req.sampling.temperature = 0
    req.sampling.top_p = 1.0
    req.sampling.repetition_penalty = 1.0
    with grpc.insecure_channel(address) as ch:
        call = ch.unary_stream("/cairn.v1.Worker/Generate",
                               request_serializer=w.GenerateRequest.SerializeToString,
                               response_deserializer=w.GenerateEvent.FromString)
        try:
            for ev in call(req, timeout=120):
                kind = ev.WhichOneof("event")
                if kind == "token":
                    emit({"token": ev.token.id})
                elif kind == "finish":
                    emit({"finish": ev.finish.reason,
                          "completion_tokens": ev.finish.usage.completion_tokens})
                else:
                    emit({"error": ev.error.message})
            emit({"status": "OK"})
        except grpc.RpcError as e:
            emit({"status": e.code().name, "message": e.details()})
    return 0


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    sys.path.insert(0, sys.argv[1])
    import importlib
    pb = type("pb", (), {})
    pb.worker_pb2 = importlib.import_module("cairn.v1.worker_pb2")
    pb.controller_pb2 = importlib.import_module("cairn.v1.controller_pb2")
    if sys.argv[2] == "controller":
        return controller(pb)
    if sys.argv[2] == "generate" and len(sys.argv) == 6:
        return generate(pb, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
