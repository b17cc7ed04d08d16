"""cairn_client: a small Python client of the cairn.v1.Serving gRPC API.

MindSpore Serving's shape::

    from cairn_client import Client
    client = Client("127.0.0.1:5500", "stories260K", "generate")
    outputs = client.infer([{"prompt": "Once upon a time", "max_tokens": 16}])
    print(outputs[0]["text"])
    for event in client.infer_stream([{"prompt": "Once"}]):
        print(event.get("text", ""), end="", flush=True)

Runs on Debian's python3-grpcio and python3-protobuf (/usr/bin/python3). The
message classes come from the build: serving_pb2.py is generated into
BUILD/python/cairn/v1/ (the cairn_python_protos target). That directory is
found from the constructor's `proto_path`, else $CAIRN_PYTHON_PROTOS, else
build/python beside this file's checkout. Calls go through
channel.unary_unary / unary_stream with the _pb2 serializers, so no grpc_tools
are needed. Every call has a deadline (`timeout`, 600 s by default).

Inputs: str, int, float and bool values go over as such; lists and dicts are
sent as JSON strings (so `messages` and a list of `stop` strings can be given
as Python objects). Errors raise ServingError with the server's message and an
HTTP-like code (400 bad input, 404 unknown servable or method, 503 busy or
unreachable, 504 deadline passed).
"""

import importlib.util
import json
import os
import sys
import threading
import time

import grpc

_pb2 = None
_PB2_LOCK = threading.Lock()  # clients made on several threads load the module once
_PB2_MODULE = "_cairn_v1_serving_pb2"  # as python/cairn/client.py names it


def _default_proto_dirs():
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(os.path.dirname(here), "build", "python")]


def _load_protos(proto_path=None):
    """Loads cairn/v1/serving_pb2.py from the first directory that has it.

    It is loaded from its file path under a private module name, not imported
    as cairn.v1: the package python/cairn would shadow that name. The cairn
    package's client (python/cairn/client.py) uses the same private name, so
    both share one module."""
    global _pb2
    with _PB2_LOCK:
        if _pb2 is not None:
            return _pb2
        # Another loader's module (python/cairn/client.py): only once it is whole.
        deadline = time.monotonic() + 30
        while _PB2_MODULE in sys.modules and not getattr(sys.modules[_PB2_MODULE], "_cairn_ready", False):
            if time.monotonic() > deadline:
                raise ImportError("%s is still being loaded by another thread after 30 s" % _PB2_MODULE)
            time.sleep(0.01)
        if _PB2_MODULE in sys.modules:
            _pb2 = sys.modules[_PB2_MODULE]
            return _pb2
        _pb2 = _load_protos_from_file(proto_path)
        return _pb2


def _load_protos_from_file(proto_path):
    dirs = []
    if proto_path:
        dirs.append(proto_path)
    if os.environ.get("CAIRN_PYTHON_PROTOS"):
        dirs.append(os.environ["CAIRN_PYTHON_PROTOS"])
    dirs += _default_proto_dirs()
    for d in dirs:
        path = os.path.join(d, "cairn", "v1", "serving_pb2.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(_PB2_MODULE, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[_PB2_MODULE] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[_PB2_MODULE]
                raise
            module._cairn_ready = True
            return module
    raise ImportError(
        "cairn/v1/serving_pb2.py not found in %s: build the cairn_python_protos target "
        "and pass proto_path= or set CAIRN_PYTHON_PROTOS to BUILD/python" % dirs
    )


class ServingError(Exception):
    """A failed call or instance: `code` is HTTP-like, `message` the server's.

    When some instances of a call failed, `outputs` holds every instance's
    result (a failed one as {"error": message, "error_code": code})."""

    def __init__(self, code, message, outputs=None):
        super().__init__("%s (%d)" % (message, code))
        self.code = code
        self.message = message
        self.outputs = outputs


_GRPC_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNIMPLEMENTED: 404,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def _to_value(pb2, name, v):
    out = pb2.Value()
    if isinstance(v, bool):  # before int: bool is an int in Python
        out.bool_value = v
    elif isinstance(v, int):
        out.int_value = v
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, (bytes, bytearray)):
        out.bytes_value = bytes(v)
    elif isinstance(v, (list, tuple, dict)):
        out.string_value = json.dumps(v)
    else:
        raise TypeError("input %r has an unsupported type %s" % (name, type(v).__name__))
    return out


def _from_value(v):
    kind = v.WhichOneof("kind")
    return None if kind is None else getattr(v, kind)


def _from_instance(inst):
    return {k: _from_value(v) for k, v in inst.items.items()}


class Client:
    """One servable and method of a Serving endpoint (HOST:PORT)."""

    def __init__(self, address, servable, method, timeout=600.0, proto_path=None):
        self._pb2 = _load_protos(proto_path)
        self.address = address
        self.servable = servable
        self.method = method
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            address,
            options=[("grpc.max_receive_message_length", 64 << 20),
                     ("grpc.max_send_message_length", 64 << 20)],
        )
        pb2 = self._pb2
        self._predict = self._channel.unary_unary(
            "/cairn.v1.Serving/Predict",
            request_serializer=pb2.PredictRequest.SerializeToString,
            response_deserializer=pb2.PredictReply.FromString,
        )
        self._predict_stream = self._channel.unary_stream(
            "/cairn.v1.Serving/PredictStream",
            request_serializer=pb2.PredictRequest.SerializeToString,
            response_deserializer=pb2.PredictReply.FromString,
        )
        self._list = self._channel.unary_unary(
            "/cairn.v1.Serving/ListServables",
            request_serializer=pb2.ListServablesRequest.SerializeToString,
            response_deserializer=pb2.ListServablesReply.FromString,
        )

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, instances):
        if isinstance(instances, dict):
            instances = [instances]
        pb2 = self._pb2
        req = pb2.PredictRequest()
        req.servable_spec.name = self.servable
        req.servable_spec.method_name = self.method
        for inst in instances:
            msg = req.instances.add()
            for name, value in inst.items():
                msg.items[name].CopyFrom(_to_value(pb2, name, value))
        return req, len(instances)

    def _rpc_error(self, e):
        code = _GRPC_CODES.get(e.code(), 500)
        if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ServingError(code, "no reply from %s within %g s" % (self.address, self.timeout))
        if e.code() == grpc.StatusCode.UNAVAILABLE:
            return ServingError(code, "the Serving endpoint at %s is unavailable: %s"
                                % (self.address, e.details()))
        return ServingError(code, e.details() or str(e.code()))

    def infer(self, instances):
        """Predict: a list of input dicts -> a list of output dicts (text,
        finish_reason, prompt_tokens, completion_tokens), in order."""
        req, n = self._request(instances)
        try:
            reply = self._predict(req, timeout=self.timeout)
        except grpc.RpcError as e:
            raise self._rpc_error(e) from None
        if len(reply.instances) == 0 and len(reply.error_msg) >= 1:
            e = reply.error_msg[0]
            raise ServingError(e.error_code or 500, e.error_msg)
        if len(reply.instances) != n:
            raise ServingError(500, "the server replied with %d instances for %d inputs"
                               % (len(reply.instances), n))
        outputs = [_from_instance(i) for i in reply.instances]
        first = None
        for i, e in enumerate(reply.error_msg[:n]):
            if e.error_code != 0:
                outputs[i] = {"error": e.error_msg, "error_code": e.error_code}
                if first is None:
                    first = e
        if first is not None:
            raise ServingError(first.error_code, first.error_msg, outputs)
        return outputs

    def infer_stream(self, instances):
        """PredictStream: yields one dict per event as it arrives:
        {"instance": i, "text": delta}; an instance's last event adds
        finish_reason, prompt_tokens and completion_tokens, or is
        {"instance": i, "error": message, "error_code": code}. A failure of
        the whole call raises ServingError."""
        req, n = self._request(instances)
        stream = self._predict_stream(req, timeout=self.timeout)
        try:
            for reply in stream:
                i = reply.instance_index
                if i >= n:
                    stream.cancel()
                    raise ServingError(500, "the server sent instance index %d of %d" % (i, n))
                if len(reply.error_msg) > 0:
                    e = reply.error_msg[0]
                    yield {"instance": i, "error": e.error_msg, "error_code": e.error_code}
                    continue
                event = {"instance": i, "text": ""}
                if len(reply.instances) > 0:
                    event.update(_from_instance(reply.instances[0]))
                yield event
        except grpc.RpcError as e:
            raise self._rpc_error(e) from None
        finally:
            stream.cancel()  # a no-op once done; stops the call if the caller broke off

    def infer_stream_all(self, instances, on_event=None):
        """PredictStream, assembled: the same outputs infer() gives."""
        req_n = 1 if isinstance(instances, dict) else len(instances)
        outputs = [{"text": ""} for _ in range(req_n)]
        failed = None
        for ev in self.infer_stream(instances):
            if on_event:
                on_event(ev)
            i = ev["instance"]
            if "error" in ev:
                outputs[i] = {"error": ev["error"], "error_code": ev["error_code"]}
                if failed is None:
                    failed = ev
                continue
            text = outputs[i]["text"] + ev.get("text", "")
            outputs[i].update(ev)
            outputs[i]["text"] = text
            outputs[i].pop("instance", None)
        if failed is not None:
            raise ServingError(failed["error_code"], failed["error"], outputs)
        return outputs

    def list_servables(self):
        """[{"name", "methods", "n_ctx"}] of the endpoint."""
        try:
            reply = self._list(self._pb2.ListServablesRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            raise self._rpc_error(e) from None
        return [{"name": s.name, "methods": list(s.methods), "n_ctx": s.n_ctx}
                for s in reply.servables]


def _typed(name, value):
    if name in ("prompt", "messages", "stop"):
        return value
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    if value in ("true", "false"):
        return value == "true"
    return value


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(prog="cairn_client.py",
                                description="call a cairn.v1.Serving endpoint")
    p.add_argument("--address", required=True, help="HOST:PORT")
    p.add_argument("--servable", default="", help="the model (empty: the only one)")
    p.add_argument("--method", default="generate", help="generate or chat")
    p.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--stream", action="store_true", help="print text as it is generated")
    p.add_argument("--list", action="store_true", help="list the servables")
    p.add_argument("--timeout", type=float, default=600.0, help="deadline in seconds")
    p.add_argument("--protos", default=None, help="BUILD/python with cairn/v1/serving_pb2.py")
    args = p.parse_args(argv)
    try:
        client = Client(args.address, args.servable, args.method, args.timeout, args.protos)
        if args.list:
            for s in client.list_servables():
                print("%s\tmethods=%s\tn_ctx=%d" % (s["name"], ",".join(s["methods"]), s["n_ctx"]))
            return 0
        inst = {}
        for item in args.input:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise ServingError(400, "--input %r is not NAME=VALUE" % item[:64])
            inst[name] = _typed(name, value)
        if args.stream:
            for ev in client.infer_stream([inst]):
                if "error" in ev:
                    raise ServingError(ev["error_code"], ev["error"])
                sys.stdout.write(ev.get("text", ""))
                sys.stdout.flush()
            sys.stdout.write("\n")
        else:
            print(client.infer([inst])[0]["text"])
        return 0
    except (ServingError, ImportError, TypeError) as e:
        sys.stderr.write("cairn_client: error: %s\n" % str(e).replace("\n", " "))
        return 1


if __name__ == "__main__":
    sys.exit(main())
