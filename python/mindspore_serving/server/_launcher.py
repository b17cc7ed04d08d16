# mindspore_serving/server/_launcher.py — MindSpore Serving's start API, carried out by running `cairn serve`.
"""MindSpore Serving's server start API over the cairn binary.

A MindSpore start script calls start_servables(configs), then
start_grpc_server(addr) and/or start_restful_server(addr), and then its main
code ends while the server keeps serving. Here start_servables only records
the servables; each start_*_server call (re)starts one `cairn serve` child
with everything recorded so far (the second call restarts it with both
addresses, as cairn binds its ports at start) and returns once the child
prints "cairn: ready". When the script's main code ends, an atexit handler
keeps this process alive until the child exits; SIGINT and SIGTERM sent to
this process are forwarded to the child, which drains and exits. stop() ends
the child at once.

What never happens here: serving in this process, or more than one child.
cairn reads one servable directory (`--servable-dir`), so every config must
name the same one; it binds one host for gRPC and REST, so both addresses
must name the same host; it serves the newest version of each servable and any
version a request asks for, so a config's version_number only logs a warning;
devices and decryption keys do not apply (cairn runs GGUF models on the CPU).
"""

import atexit
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

__all__ = ["ServableStartConfig", "SSLConfig", "start_servables", "start_grpc_server",
           "start_restful_server", "stop", "command_line", "build_command", "find_binary"]

_log = logging.getLogger("mindspore_serving")

# Seconds the child may take to print "cairn: ready" (models load first);
# $CAIRN_START_TIMEOUT overrides.
_READY_TIMEOUT_S = 600.0
# Seconds a child stopped for a restart or by stop() may take to drain.
_STOP_TIMEOUT_S = 60.0


def _check_str(name, value):
    if not isinstance(value, str):
        raise RuntimeError("Parameter '%s' should be str, but actually %s" % (name, type(value)))
    if not value:
        raise RuntimeError("Parameter '%s' should not be empty str" % name)


def _check_int(name, value, minimum=None, maximum=None):
    if not isinstance(value, int) or isinstance(value, bool):
        raise RuntimeError("Parameter '%s' should be int, but actually %s" % (name, type(value)))
    if minimum is not None and value < minimum or maximum is not None and value > maximum:
        lo = "" if minimum is None else str(minimum)
        hi = "" if maximum is None else str(maximum)
        raise RuntimeError("Parameter '%s' should be in range [%s,%s], but actually %d"
                           % (name, lo, hi, value))


class ServableStartConfig:
    """One servable to serve: MindSpore Serving's signature and checks.

    servable_directory holds a folder named servable_name (with its
    servable_config.py and version folders). version_number 0 means the
    newest version. device_ids, device_type, num_parallel_workers, dec_key
    and dec_mode are checked as MindSpore checks them and otherwise unused."""

    def __init__(self, servable_directory, servable_name, device_ids=None, version_number=0,
                 device_type=None, num_parallel_workers=0, dec_key=None, dec_mode='AES-GCM'):
        _check_str("servable_directory", servable_directory)
        _check_str("servable_name", servable_name)
        _check_int("version_number", version_number, 0)
        _check_int("num_parallel_workers", num_parallel_workers, 0, 64)
        if dec_key is not None:
            if not isinstance(dec_key, bytes):
                raise RuntimeError("Parameter 'dec_key' should be bytes, but actually %s"
                                   % type(dec_key))
            if len(dec_key) not in (16, 24, 32):
                raise RuntimeError("Parameter 'dec_key' length %d expected to be 16, 24 or 32"
                                   % len(dec_key))
        _check_str("dec_mode", dec_mode)
        if dec_mode not in ("AES-GCM", "AES-CBC"):
            raise RuntimeError("Parameter 'dec_mode' expected to be 'AES-GCM' or 'AES-CBC'")
        if device_ids is None:
            device_ids = ()
        elif isinstance(device_ids, int) and not isinstance(device_ids, bool):
            device_ids = (device_ids,)
        if not isinstance(device_ids, (list, tuple)):
            raise RuntimeError("Parameter 'device_ids' should be int, list or tuple of int, but "
                               "actually %s" % type(device_ids))
        for d in device_ids:
            _check_int("device_ids", d, 0)
        if device_type is not None:
            _check_str("device_type", device_type)
            if device_type.lower() not in ("ascend", "gpu", "cpu", "none"):
                raise RuntimeError("Unsupported device type '%s', only support 'Ascend', 'GPU', "
                                   "'CPU' and None, case ignored" % device_type)
        self.servable_directory = os.path.abspath(servable_directory)
        self.servable_name = servable_name
        self.version_number = version_number
        self.device_ids = tuple(device_ids)
        self.device_type = "none" if device_type is None else device_type.lower()
        self.num_parallel_workers = num_parallel_workers or 1
        self.dec_key = dec_key
        self.dec_mode = dec_mode

    def __repr__(self):
        return "ServableStartConfig(%r, %r, version_number=%d)" % (
            self.servable_directory, self.servable_name, self.version_number)


class SSLConfig:
    """MindSpore Serving's server SSLConfig. cairn serves without TLS here, so
    a server started with one is refused (rather than silently in plain text)."""

    def __init__(self, certificate, private_key, custom_ca=None, verify_client=False):
        _check_str("certificate", certificate)
        _check_str("private_key", private_key)
        if custom_ca is not None:
            _check_str("custom_ca", custom_ca)
        if not isinstance(verify_client, bool):
            raise RuntimeError("Parameter 'verify_client' should be bool, but actually %s"
                               % type(verify_client))
        self.certificate = certificate
        self.private_key = private_key
        self.custom_ca = custom_ca
        self.verify_client = verify_client


def _repo_root():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(os.path.dirname(here)))


def find_binary():
    """The cairn binary: $CAIRN_BINARY, else the build beside this checkout
    (build/cairn, build/tools/cairn/cairn), else `cairn` on PATH."""
    env = os.environ.get("CAIRN_BINARY")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise RuntimeError("CAIRN_BINARY=%s is not an executable file" % env)
        return env
    root = _repo_root()
    for rel in (("build", "cairn"), ("build", "tools", "cairn", "cairn")):
        path = os.path.join(root, *rel)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("cairn")
    if found:
        return found
    raise RuntimeError("the cairn binary was not found: set CAIRN_BINARY, build it into %s, or "
                       "put `cairn` on PATH" % os.path.join(root, "build"))


def _parse_address(kind, address):
    """(host, port) of "HOST:PORT" or "[V6]:PORT"; RuntimeError otherwise."""
    _check_str("address", address)
    if address.startswith("unix:"):
        raise RuntimeError("%s address %r: cairn listens on TCP only (HOST:PORT)" % (kind, address))
    if address.startswith("["):
        end = address.find("]")
        if end < 0 or address[end + 1:end + 2] != ":":
            raise RuntimeError("%s address %r is not [HOST]:PORT" % (kind, address))
        host, port = address[1:end], address[end + 2:]
    else:
        host, sep, port = address.rpartition(":")
        if not sep or ":" in host:
            raise RuntimeError("%s address %r is not HOST:PORT" % (kind, address))
    if not host:
        raise RuntimeError("%s address %r has no host" % (kind, address))
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise RuntimeError("%s address %r has no port in [0,65535]" % (kind, address))
    if host == "localhost":  # cairn binds numeric addresses
        host = "127.0.0.1"
    return host, int(port)


def build_command(servable_configs, grpc_address=None, restful_address=None,
                  restful_max_msg_mb_size=None, binary=None, grpc_max_msg_mb_size=None,
                  distributed=None):
    """The `cairn serve` command line for these configs and addresses (a list).

    RuntimeError when the configs name more than one servable directory, the
    two addresses name different hosts, or neither address is given."""
    configs = list(servable_configs)
    if not configs:
        raise RuntimeError("no servables: call start_servables() first")
    dirs = sorted({c.servable_directory for c in configs})
    if len(dirs) > 1:
        raise RuntimeError("cairn serves servables from one directory, but the configs name %s"
                           % ", ".join(dirs))
    if grpc_address is None and restful_address is None:
        raise RuntimeError("neither a gRPC nor a RESTful address to serve on")
    grpc = _parse_address("gRPC", grpc_address) if grpc_address is not None else None
    rest = _parse_address("RESTful", restful_address) if restful_address is not None else None
    if grpc and rest and grpc[0] != rest[0]:
        raise RuntimeError("cairn binds one host for gRPC and REST, but the gRPC address names %s "
                           "and the RESTful address %s" % (grpc[0], rest[0]))
    host = (grpc or rest)[0]
    cmd = [binary or find_binary(), "serve", "--servable-dir", dirs[0]]
    names = []
    for c in configs:
        if c.servable_name not in names:
            names.append(c.servable_name)
    for name in names:
        cmd += ["--servable", name]
    cmd += ["--host", host]
    # cairn always serves HTTP: without a RESTful address it takes any free port.
    cmd += ["--port", str(rest[1] if rest else 0)]
    if rest and restful_max_msg_mb_size is not None:
        cmd += ["--max-body-bytes", str(restful_max_msg_mb_size << 20)]
    if grpc:
        cmd += ["--grpc-port", str(grpc[1])]
        if grpc_max_msg_mb_size is not None:
            cmd += ["--grpc-max-message-mb", str(grpc_max_msg_mb_size)]
    if distributed is not None:
        cmd += ["--distributed-address", distributed[0], "--wait-agents-seconds", str(distributed[1])]
    return cmd


class _State:
    def __init__(self):
        self.lock = threading.RLock()
        self.configs = []
        self.grpc_address = None
        self.restful_address = None
        self.restful_max_msg_mb_size = None
        self.grpc_max_msg_mb_size = None
        self.child = None
        self.atexit_registered = False
        self.old_handlers = {}
        self.distributed = None  # (address, wait seconds) once distributed.start_servable ran


_state = _State()


def command_line():
    """The command line start_*_server runs for what has been started so far."""
    with _state.lock:
        return build_command(_state.configs, _state.grpc_address, _state.restful_address,
                             _state.restful_max_msg_mb_size,
                             grpc_max_msg_mb_size=_state.grpc_max_msg_mb_size,
                             distributed=_state.distributed)


def _stop_on_error(func):
    """As MindSpore's API does: a start call that fails stops what was started,
    so a script that dies of it does not leave a server behind."""
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except BaseException:
            stop()
            raise

    wrapper.__name__ = func.__name__
    wrapper.__qualname__ = func.__qualname__
    wrapper.__doc__ = func.__doc__
    return wrapper


@_stop_on_error
def start_servables(servable_configs, enable_lite=False):
    """Records the servables to serve; the server starts with start_grpc_server
    or start_restful_server (or restarts, when one is already running)."""
    if isinstance(servable_configs, ServableStartConfig):
        servable_configs = (servable_configs,)
    if not isinstance(servable_configs, (list, tuple)):
        raise RuntimeError("Parameter 'servable_configs' should be ServableStartConfig, list or "
                           "tuple of ServableStartConfig, but actually %s" % type(servable_configs))
    if not isinstance(enable_lite, bool):
        raise RuntimeError("Parameter 'enable_lite' should be bool, but actually %s"
                           % type(enable_lite))
    for c in servable_configs:
        if not isinstance(c, ServableStartConfig):
            raise RuntimeError("The item of parameter 'servable_configs' should be "
                               "ServableStartConfig, but actually %s" % type(c))
        folder = os.path.join(c.servable_directory, c.servable_name)
        if not os.path.isdir(folder):
            raise RuntimeError("servable '%s': %s is not a directory" % (c.servable_name, folder))
        if c.version_number != 0:
            _log.warning("servable '%s': version_number %d is not pinned; cairn serves the newest "
                         "version and any version a request asks for",
                         c.servable_name, c.version_number)
        if c.device_type not in ("none", "cpu") or c.device_ids:
            _log.warning("servable '%s': device settings are ignored (cairn runs on the CPU)",
                         c.servable_name)
        if c.dec_key is not None:
            _log.warning("servable '%s': dec_key is ignored (cairn loads unencrypted GGUF files)",
                         c.servable_name)
    with _state.lock:
        all_configs = _state.configs + list(servable_configs)
        if len({c.servable_directory for c in all_configs}) > 1:
            raise RuntimeError("cairn serves servables from one directory, but the configs name "
                               "%s" % ", ".join(sorted({c.servable_directory for c in all_configs})))
        _state.configs = all_configs
        if _state.child is not None:
            _launch()


def _check_server_args(max_msg_mb_size, ssl_config):
    _check_int("max_msg_mb_size", max_msg_mb_size, 1, 512)
    if ssl_config is not None:
        raise RuntimeError("cairn's gRPC and REST servers do not take TLS here (ssl_config); "
                           "put a TLS proxy in front of it")


@_stop_on_error
def start_grpc_server(address, max_msg_mb_size=100, ssl_config=None):
    """Serves the recorded servables over gRPC at HOST:PORT; returns once ready."""
    _check_server_args(max_msg_mb_size, ssl_config)
    _parse_address("gRPC", address)
    with _state.lock:
        _state.grpc_address = address
        _state.grpc_max_msg_mb_size = max_msg_mb_size
        _launch()


@_stop_on_error
def start_restful_server(address, max_msg_mb_size=100, ssl_config=None):
    """Serves the recorded servables over REST at HOST:PORT; returns once ready."""
    _check_server_args(max_msg_mb_size, ssl_config)
    _parse_address("RESTful", address)
    with _state.lock:
        _state.restful_address = address
        _state.restful_max_msg_mb_size = max_msg_mb_size
        _launch()


def stop():
    """Stops the server (drained, then killed after a minute) and forgets what
    was started."""
    with _state.lock:
        _stop_child()
        _state.configs = []
        _state.grpc_address = None
        _state.restful_address = None
        _state.restful_max_msg_mb_size = None


def _parent_death_signal_setter():
    """A function for the child to run before exec: SIGTERM when this process
    dies, even by SIGKILL. Linux ties it to the thread that forks, so it is set
    only when the main thread starts the child. Resolved here, before the fork,
    so the child only makes one system call."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        return None
    term = int(signal.SIGTERM)

    def set_it():
        prctl(1, term)  # PR_SET_PDEATHSIG

    return set_it


def _stop_child():
    child = _state.child
    _state.child = None
    if child is None or child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _forward_stderr(child, ready, status, tail):
    """Copies the child's stderr to ours; sets `ready` at "cairn: ready"."""
    for raw in child.stderr:
        line = raw.decode("utf-8", "replace")
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):  # our stderr is gone (closed, or at shutdown)
            pass
        tail.append(line.rstrip("\n"))
        del tail[:-20]
        if line.strip() == "cairn: ready":
            status["ready"] = True
            ready.set()
    ready.set()  # the child closed stderr (it is exiting): the waiter reads its status


def _launch():
    """(Re)starts the child with the current settings; returns at "cairn: ready"."""
    cmd = command_line()
    _stop_child()
    _log.info("starting %s", " ".join(cmd))
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True,  # a terminal's Ctrl+C reaches us, not it
                             preexec_fn=_parent_death_signal_setter())
    ready = threading.Event()
    status = {"ready": False}
    tail = []
    threading.Thread(target=_forward_stderr, args=(child, ready, status, tail), daemon=True,
                     name="cairn-stderr").start()
    _state.child = child
    _install_handlers()
    try:
        timeout = float(os.environ.get("CAIRN_START_TIMEOUT", _READY_TIMEOUT_S))
    except ValueError:
        timeout = _READY_TIMEOUT_S
    deadline = time.monotonic() + timeout
    while not ready.wait(0.1):
        if time.monotonic() > deadline:
            _stop_child()
            raise RuntimeError("cairn did not get ready within %g s: %s" % (timeout, " ".join(cmd)))
    if not status["ready"]:
        try:
            child.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        _state.child = None
        raise RuntimeError("cairn exited with status %s before it was ready: %s"
                           % (child.returncode, tail[-1] if tail else "(no output)"))


def _forward_signal(signum, frame):  # noqa: ARG001
    child = _state.child
    if child is not None and child.poll() is None:
        child.send_signal(signum)
    previous = _state.old_handlers.get(signum)
    if previous == signal.SIG_IGN:
        return
    if callable(previous):
        previous(signum, frame)
    elif signum == signal.SIGTERM:
        raise SystemExit(128 + signum)


def _install_handlers():
    """Forwards SIGINT and SIGTERM to the child (from the main thread only, as
    Python requires), then lets the previous handler run; registers the atexit
    wait once."""
    if not _state.atexit_registered:
        atexit.register(_wait_at_exit)
        _state.atexit_registered = True
    if _state.old_handlers or threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        _state.old_handlers[signum] = signal.getsignal(signum)
        signal.signal(signum, _forward_signal)


def _wait_at_exit():
    """At the end of the script: keep serving until the child exits, as
    MindSpore Serving's process stays up. Signals now only reach the child."""
    child = _state.child
    if child is None:
        return
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda s, f: child.poll() is None and child.send_signal(s))
    while child.poll() is None:
        try:
            child.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
