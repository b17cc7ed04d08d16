# cairn/client.py — the Python client of the cairn.v1.Serving gRPC API, in MindSpore Serving's shape.
"""The Python client of cairn's Serving gRPC API, in MindSpore Serving's shape.

Owns the conversion between Python values (numpy arrays and scalars, str,
bytes, bool, int, float) and the wire's Value messages, and the three calls:
``infer`` (Predict), ``infer_async`` (Predict through grpc's future) and
``infer_stream`` (PredictStream). Never starts a server and never retries.

    from cairn import Client            # or: from mindspore_serving.client import Client
    client = Client("127.0.0.1:5500", "add", "add_common")
    result = client.infer([{"x1": np.ones((2, 2), np.float32),
                            "x2": np.ones((2, 2), np.float32)}])
    # [{'y': array([[2., 2.], [2., 2.]], dtype=float32)}]

Results, as MindSpore Serving gives them:
- every instance succeeded: a list with one dict of outputs per instance;
- some instances failed: the same list, a failed instance as {"error": msg};
- the whole request failed (the server's single error entry, or a gRPC
  failure such as an unreachable server): one dict {"error": msg}, not a list.
Bad arguments (an unsupported value type, an empty servable name) raise
RuntimeError before anything is sent.

The message classes come from the build: serving_pb2.py is generated into
BUILD/python/cairn/v1/ (the cairn_python_protos target). Its package is
cairn.v1, which would clash with this package's name on import, so it is
loaded from its file path under a private module name. The directory is found
from the ``proto_path`` argument, else $CAIRN_PYTHON_PROTOS, else build/python
beside this checkout.
"""

import importlib.util
import os
import sys
import threading
import time

import grpc
import numpy as np

__all__ = ["Client", "SSLConfig", "ClientGrpcAsyncResult", "ClientGrpcAsyncError",
           "load_serving_pb2"]

# The private name serving_pb2 is imported under (python/cairn_client.py uses
# the same one, so both share one module and one set of message classes).
_PB2_MODULE = "_cairn_v1_serving_pb2"
# MindSpore's client accepts messages of up to 512 MiB both ways.
_MAX_MESSAGE_BYTES = 512 << 20

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Clients made on several threads at once load the module once: the loader
# holds this lock, and a module another loader (python/cairn_client.py) is
# still executing is waited for, not returned half made.
_PB2_LOCK = threading.Lock()


def _loaded_pb2():
    """The module once it is whole (a loader sets _cairn_ready last), else None."""
    deadline = time.monotonic() + 30
    while True:
        module = sys.modules.get(_PB2_MODULE)
        if module is None or getattr(module, "_cairn_ready", False):
            return module
        if time.monotonic() > deadline:
            raise RuntimeError("%s is still being loaded by another thread after 30 s" % _PB2_MODULE)
        time.sleep(0.01)


def load_serving_pb2(proto_path=None):
    """The generated cairn/v1/serving_pb2 module, from the first of: proto_path,
    $CAIRN_PYTHON_PROTOS, build/python beside this checkout."""
    with _PB2_LOCK:
        return _load_serving_pb2_locked(proto_path)


def _load_serving_pb2_locked(proto_path):
    loaded = _loaded_pb2()
    if loaded is not None:
        return loaded
    dirs = []
    if proto_path:
        dirs.append(proto_path)
    if os.environ.get("CAIRN_PYTHON_PROTOS"):
        dirs.append(os.environ["CAIRN_PYTHON_PROTOS"])
    dirs.append(os.path.join(_repo_root(), "build", "python"))
    for d in dirs:
        path = os.path.join(d, "cairn", "v1", "serving_pb2.py")
        if not os.path.isfile(path):
            continue
        spec = importlib.util.spec_from_file_location(_PB2_MODULE, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_PB2_MODULE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[_PB2_MODULE]
            raise
        if "tensor_value" not in module.Value.DESCRIPTOR.fields_by_name:
            del sys.modules[_PB2_MODULE]
            raise RuntimeError("%s predates tensors (no Value.tensor_value): rebuild the "
                               "cairn_python_protos target" % path)
        module._cairn_ready = True
        return module
    raise RuntimeError("cairn/v1/serving_pb2.py not found in %s: build the cairn_python_protos "
                       "target and pass proto_path= or set CAIRN_PYTHON_PROTOS to BUILD/python"
                       % dirs)


# numpy's dtype names as the wire spells them, with their little-endian
# numpy types. bfloat16 has no numpy type: it travels as its raw 16 bits.
_WIRE_DTYPES = {
    "bool": np.dtype("bool"),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
    "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}
_MAX_RANK = 32  # as the server's (core/value.h kMaxTensorRank)


def _check_str(name, value):
    if not isinstance(value, str):
        raise RuntimeError("Parameter '%s' should be str, but actually %s" % (name, type(value)))
    if not value:
        raise RuntimeError("Parameter '%s' should not be empty str" % name)


def _check_int(name, value, minimum=None):
    if not isinstance(value, int) or isinstance(value, bool):
        raise RuntimeError("Parameter '%s' should be int, but actually %s" % (name, type(value)))
    if minimum is not None and value < minimum:
        raise RuntimeError("Parameter '%s' should be >= %d" % (name, minimum))


def _tensor_to_wire(tensor_msg, name, array):
    """Fills a Tensor message from a numpy array or scalar."""
    array = np.asarray(array)
    dtype_name = array.dtype.name
    if dtype_name not in _WIRE_DTYPES:
        raise RuntimeError("input '%s' has dtype %s, which cairn does not carry (it carries %s)"
                           % (name, array.dtype, ", ".join(_WIRE_DTYPES)))
    if array.ndim > _MAX_RANK:
        raise RuntimeError("input '%s' has %d dimensions, more than %d" % (name, array.ndim, _MAX_RANK))
    if dtype_name == "bfloat16":
        # ml_dtypes' bfloat16 (2 bytes): its bits, little-endian.
        data = array.view(np.uint16).astype("<u2", copy=False).tobytes()
    else:
        data = array.astype(_WIRE_DTYPES[dtype_name], copy=False).tobytes()  # C order
    tensor_msg.dtype = dtype_name
    tensor_msg.shape.extend(int(d) for d in array.shape)
    tensor_msg.data = data


def _value_to_wire(value_msg, name, value):
    """Fills a Value message from one input; RuntimeError for what cannot travel."""
    if isinstance(value, np.ndarray) or (isinstance(value, np.generic)
                                         and not isinstance(value, (str, bytes))):
        # numpy scalars travel as 0-d tensors, keeping their dtype; np.str_
        # and np.bytes_ are str and bytes.
        _tensor_to_wire(value_msg.tensor_value, name, value)
    elif isinstance(value, bool):  # before int: a bool is an int in Python
        value_msg.bool_value = value
    elif isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise RuntimeError("input '%s' is %d, outside int64" % (name, value))
        value_msg.int_value = value
    elif isinstance(value, float):
        value_msg.double_value = value
    elif isinstance(value, str):
        value_msg.string_value = str(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        value_msg.bytes_value = bytes(value)
    else:
        raise RuntimeError("Not support value type %s of input '%s' (use a numpy array or "
                           "scalar, str, bytes, bool, int or float)" % (type(value), name))


def _tensor_from_wire(t):
    """A numpy array from a Tensor message; RuntimeError when the message is malformed."""
    wire = _WIRE_DTYPES.get(t.dtype)
    if wire is None:
        raise RuntimeError("the server sent a tensor of unknown dtype %r" % t.dtype[:32])
    shape = list(t.shape)
    if len(shape) > _MAX_RANK or any(d < 0 for d in shape):
        raise RuntimeError("the server sent a tensor of invalid shape %s" % shape[:_MAX_RANK + 1])
    count = 1
    for d in shape:
        count *= d
    if count * wire.itemsize != len(t.data):
        raise RuntimeError("the server sent a %s tensor of shape %s with %d bytes, not %d"
                           % (t.dtype, shape, len(t.data), count * wire.itemsize))
    array = np.frombuffer(t.data, dtype=wire).reshape(shape)
    if t.dtype == "bfloat16":
        # bfloat16 is the upper half of a float32: widening is exact.
        wide = array.reshape(-1).astype("<u4") << 16  # 1-d: a 0-d result would be a scalar
        return wide.view("<f4").astype(np.float32, copy=False).reshape(shape)
    return array.astype(wire.newbyteorder("="), copy=False)


def _value_from_wire(v):
    kind = v.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "tensor_value":
        return _tensor_from_wire(v.tensor_value)
    return getattr(v, kind)


def _instance_from_wire(inst):
    return {k: _value_from_wire(v) for k, v in inst.items.items()}


def _grpc_error(e):
    """A whole-request failure as MindSpore's client reports a gRPC error."""
    code = e.code() if hasattr(e, "code") else None
    value = code.value if code is not None else "unknown"
    details = e.details() if hasattr(e, "details") else str(e)
    return {"error": "Grpc Error, %s, %s" % (value, details)}


def _parse_reply(reply, n_sent):
    """MindSpore's reading of a PredictReply: a list of per-instance dicts, or
    {"error": msg} when the reply carries one failure for the whole request."""
    n_errors = len(reply.error_msg)
    if n_errors == 1 and reply.error_msg[0].error_code != 0:
        return {"error": reply.error_msg[0].error_msg}
    n_instances = len(reply.instances)
    if n_errors not in (0, n_instances):
        raise RuntimeError("the server sent %d error entries for %d instances (expected 0, 1 or "
                           "one per instance)" % (n_errors, n_instances))
    if n_instances != n_sent:
        raise RuntimeError("the server replied with %d instances for %d sent"
                           % (n_instances, n_sent))
    out = []
    for i, inst in enumerate(reply.instances):
        if n_errors == 0 or reply.error_msg[i].error_code == 0:
            out.append(_instance_from_wire(inst))
        else:
            out.append({"error": reply.error_msg[i].error_msg})
    return out


class SSLConfig:
    """TLS settings of a client channel, as MindSpore's client.SSLConfig: files
    holding the PEM certificate chain, private key and root certificates."""

    def __init__(self, certificate=None, private_key=None, custom_ca=None):
        for name, value in (("certificate", certificate), ("private_key", private_key),
                            ("custom_ca", custom_ca)):
            if value is not None:
                _check_str(name, value)
        self.certificate = certificate
        self.private_key = private_key
        self.custom_ca = custom_ca


def _read_file(path):
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise RuntimeError("cannot read %s: %s" % (path, e.strerror)) from None


class ClientGrpcAsyncResult:
    """What infer_async returns: result() waits for the reply and reads it as
    infer() does (a gRPC failure gives {"error": "Grpc Error, ..."})."""

    def __init__(self, future, n_sent):
        self._future = future
        self._n_sent = n_sent

    def result(self, timeout=None):
        try:
            reply = self._future.result(timeout=timeout)
        except grpc.RpcError as e:
            return _grpc_error(e)
        return _parse_reply(reply, self._n_sent)

    def done(self):
        return self._future.done()

    def cancel(self):
        return self._future.cancel()


class ClientGrpcAsyncError:
    """What infer_async returns when the call could not even start."""

    def __init__(self, result_error):
        self.result_error = result_error

    def result(self, timeout=None):  # noqa: ARG002 (the same shape as ClientGrpcAsyncResult)
        return self.result_error

    def done(self):
        return True

    def cancel(self):
        return False


class Client:
    """One method of one servable at a Serving endpoint (HOST:PORT).

    The first five parameters are MindSpore Serving's (its 1.1 form,
    Client(ip, port, servable_name, method_name, version_number=0), is
    accepted too). ``timeout`` (seconds,
    None for none) bounds every call; ``proto_path`` is BUILD/python holding
    cairn/v1/serving_pb2.py. Raises RuntimeError on invalid arguments."""

    def __init__(self, address, servable_name, method_name, version_number=0, ssl_config=None,
                 *, timeout=600.0, proto_path=None):
        if (isinstance(servable_name, int) and not isinstance(servable_name, bool)
                and isinstance(version_number, str)):
            # MindSpore Serving 1.1's form: Client(ip, port, servable_name,
            # method_name, version_number=0).
            _check_int("port", servable_name, 0)
            address, servable_name, method_name, version_number, ssl_config = (
                "%s:%d" % (address, servable_name), method_name, version_number,
                0 if ssl_config is None else ssl_config, None)
        _check_str("address", address)
        _check_str("servable_name", servable_name)
        _check_str("method_name", method_name)
        _check_int("version_number", version_number, 0)
        if timeout is not None and (not isinstance(timeout, (int, float))
                                    or isinstance(timeout, bool) or not timeout > 0):
            raise RuntimeError("Parameter 'timeout' should be a positive number of seconds or None")
        self._pb2 = load_serving_pb2(proto_path)
        self.address = address
        self.servable_name = servable_name
        self.method_name = method_name
        self.version_number = version_number
        self.timeout = timeout
        options = [("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)]
        if ssl_config is not None:
            if not isinstance(ssl_config, SSLConfig):
                raise RuntimeError("The type of ssl_config should be type of SSLConfig")
            cert = _read_file(ssl_config.certificate)
            key = _read_file(ssl_config.private_key)
            if (cert is None) != (key is None):
                raise RuntimeError("The certificate and private_key should be passed at the same time")
            creds = grpc.ssl_channel_credentials(root_certificates=_read_file(ssl_config.custom_ca),
                                                 private_key=key, certificate_chain=cert)
            self._channel = grpc.secure_channel(address, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        pb2 = self._pb2
        self._predict = self._channel.unary_unary(
            "/cairn.v1.Serving/Predict",
            request_serializer=pb2.PredictRequest.SerializeToString,
            response_deserializer=pb2.PredictReply.FromString)
        self._predict_stream = self._channel.unary_stream(
            "/cairn.v1.Serving/PredictStream",
            request_serializer=pb2.PredictRequest.SerializeToString,
            response_deserializer=pb2.PredictReply.FromString)
        self._list = self._channel.unary_unary(
            "/cairn.v1.Serving/ListServables",
            request_serializer=pb2.ListServablesRequest.SerializeToString,
            response_deserializer=pb2.ListServablesReply.FromString)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, instances):
        """The PredictRequest for a dict or a list/tuple of dicts, and its size."""
        if isinstance(instances, dict):
            instances = (instances,)
        if not isinstance(instances, (list, tuple)):
            raise RuntimeError("instances should be a dict or a list or tuple of dicts, but "
                               "actually %s" % type(instances))
        req = self._pb2.PredictRequest()
        req.servable_spec.name = self.servable_name
        req.servable_spec.method_name = self.method_name
        req.servable_spec.version_number = self.version_number
        for i, inst in enumerate(instances):
            if not isinstance(inst, dict):
                raise RuntimeError("instance %d should be a dict, but actually %s" % (i, type(inst)))
            msg = req.instances.add()
            for name, value in inst.items():
                if not isinstance(name, str) or not name:
                    raise RuntimeError("instance %d has an input name %r that is not a non-empty "
                                       "str" % (i, name))
                _value_to_wire(msg.items[name], name, value)
        return req, len(instances)

    def infer(self, instances):
        """Predict: a dict or a list of dicts of inputs -> a list of dicts of
        outputs (a failed instance as {"error": msg}), or {"error": msg} when
        the whole request failed."""
        req, n = self._request(instances)
        try:
            reply = self._predict(req, timeout=self.timeout)
        except grpc.RpcError as e:
            return _grpc_error(e)
        return _parse_reply(reply, n)

    def infer_async(self, instances):
        """Predict without waiting: an object whose result() gives what infer() would."""
        req, n = self._request(instances)
        try:
            future = self._predict.future(req, timeout=self.timeout)
        except grpc.RpcError as e:
            return ClientGrpcAsyncError(_grpc_error(e))
        return ClientGrpcAsyncResult(future, n)

    def infer_stream(self, instances):
        """PredictStream (cairn's addition, for methods whose output comes from
        an LLM stage): yields one event per reply, as it arrives:

        - {"instance": i, "final": False, "outputs": {name: new_text}}: more
          text of instance i's streaming outputs;
        - {"instance": i, "final": True, "outputs": {...}}: instance i's last
          reply, with all its outputs (numpy arrays for tensors);
        - {"instance": i, "final": True, "error": msg, "error_code": code}:
          instance i failed.

        A failure of the whole call (gRPC error, unknown servable) raises
        RuntimeError("Grpc Error, CODE, details") or RuntimeError(msg)."""
        req, n = self._request(instances)
        stream = self._predict_stream(req, timeout=self.timeout)
        try:
            for reply in stream:
                i = reply.instance_index
                if i >= n:
                    raise RuntimeError("the server sent instance index %d for %d instances" % (i, n))
                if len(reply.error_msg) > 0 and reply.error_msg[0].error_code != 0:
                    e = reply.error_msg[0]
                    yield {"instance": i, "final": True, "error": e.error_msg,
                           "error_code": e.error_code}
                    continue
                outputs = _instance_from_wire(reply.instances[0]) if len(reply.instances) else {}
                yield {"instance": i, "final": bool(reply.final), "outputs": outputs}
        except grpc.RpcError as e:
            raise RuntimeError(_grpc_error(e)["error"]) from None
        finally:
            stream.cancel()  # a no-op once done; stops the call if the caller broke off

    def list_servables(self):
        """[{"name", "methods", "versions", "n_ctx"}] of the endpoint (cairn's
        addition); RuntimeError on a gRPC failure."""
        try:
            reply = self._list(self._pb2.ListServablesRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            raise RuntimeError(_grpc_error(e)["error"]) from None
        return [{"name": s.name, "methods": list(s.methods), "versions": list(s.versions),
                 "n_ctx": s.n_ctx} for s in reply.servables]
