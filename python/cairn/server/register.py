"""cairn/server/register.py — the register API a servable_config.py records a servable with.

MindSpore Serving's shape (1.6+): `declare_model()` declares a model file,
`@register_method(output_names=...)` turns a function into a method, and
inside it `add_stage()` appends a stage (a Python function or a declared
model). A method body runs once, when the config loads, on placeholders: it
records the pipeline, it computes nothing. The server's embedded interpreter
(src/servable/python_runtime.cpp) runs the config through `_load()` and reads
the recording; the stages run later, per request, in C++'s hands.

Device options of MindSpore (Context, CPUDeviceInfo, AclOptions, ...) are
accepted and ignored so existing configs load. Loads are kept apart: each
has its own context (thread-local), and a config's helper modules do not stay
in sys.modules where another servable's config would find them.
"""

import importlib.util
import inspect
import json
import os
import sys
import threading

import numpy as np

__all__ = [
    "declare_model", "declare_distributed", "register_method", "add_stage", "Model", "RegisterError",
    "ModelCallError", "Context", "CPUDeviceInfo", "GPUDeviceInfo",
    "AscendDeviceInfo", "AclOptions", "GpuOptions",
]

# What a model stage's keyword arguments may set: the LLM sampling options,
# structured outputs (by the OpenAI API's names, objects as JSON text) and
# task="embed" (the stage's output is the text's embedding).
GENERATION_OPTIONS = frozenset([
    "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
    "ignore_eos", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "response_format", "guided_json", "json_schema", "guided_regex", "guided_choice",
    "guided_grammar", "grammar", "task",
])

_CONSTANT_TYPES = (str, bytes, bool, int, float, np.ndarray, np.generic)


class RegisterError(Exception):
    """A servable_config.py that records no valid servable; the message names
    the method and the stage."""


class ModelCallError(RuntimeError):
    """model.call() failed in the server; carries the server's error kind."""


class _Context:
    """One load of one servable_config.py: what it declared and registered."""

    def __init__(self, servable_name, version_dir, caller):
        self.servable_name = servable_name
        self.version_dir = version_dir
        self.caller = caller  # serves Model.call(); None outside the server
        self.models = []
        self.methods = []
        self.recording = None  # the _Method whose body runs now
        self.loading = True


_local = threading.local()
_standalone = _Context("", "", None)  # a config imported outside the server


def _context():
    ctx = getattr(_local, "ctx", None)
    return ctx if ctx is not None else _standalone


def _type_name(value):
    return type(value).__name__


class Model:
    """A model declared by declare_model(): a stage of add_stage(), or called
    from a Python stage at request time with model.call(*args, **kwargs)."""

    def __init__(self, ctx, index, model_file, path, model_format, with_batch_dim,
                 without_batch_dim_inputs, options):
        self._ctx = ctx
        self._index = index
        self.model_file = model_file
        self.path = path
        self.model_format = model_format
        self.with_batch_dim = with_batch_dim
        self.without_batch_dim_inputs = without_batch_dim_inputs
        self.options = options

    def call(self, *args, **kwargs):
        """Runs the model (in the server, without the GIL); returns its output,
        or a tuple of them when it has several."""
        if self._ctx.caller is None:
            raise RuntimeError(
                f"model '{self.model_file}': call() needs the cairn server; this config was not "
                "loaded by it")
        if self._ctx.loading:
            raise RuntimeError(
                f"model '{self.model_file}': call() runs only inside a stage function when a "
                "method is called, not while servable_config.py loads")
        return self._ctx.caller.call(self._index, args, kwargs)

    def __repr__(self):
        return f"Model({self.model_file!r}, {self.model_format!r})"


class _Placeholder:
    """A method input or a stage output while a method body is recorded."""

    __slots__ = ("_method", "_ref", "_what")

    def __init__(self, method, ref, what):
        self._method = method
        self._ref = ref
        self._what = what

    def _misuse(self, *args, **kwargs):
        raise RegisterError(
            f"method '{self._method.name}': {self._what} is a placeholder while the method is "
            "recorded; only add_stage() and the method's return may use it (computations "
            "belong in a stage function)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _misuse
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __pow__ = __neg__ = _misuse
    __lt__ = __le__ = __gt__ = __ge__ = _misuse
    __bool__ = __len__ = __iter__ = __getitem__ = __call__ = __index__ = __float__ = _misuse
    __int__ = __array__ = _misuse

    def __repr__(self):
        return f"<placeholder: {self._what} of method '{self._method.name}'>"


class _Method:
    def __init__(self, name, inputs, output_names):
        self.name = name
        self.inputs = inputs
        self.output_names = output_names
        self.stages = []   # dicts, read by python_runtime.cpp
        self.outputs = []  # refs
        self.open = True


class _DeviceOptions:
    """MindSpore's device settings: accepted with any arguments, ignored."""

    def __init__(self, *args, **kwargs):
        self._args = args
        self._kwargs = kwargs

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None  # append_device_info() and the like


class Context(_DeviceOptions):
    pass


class CPUDeviceInfo(_DeviceOptions):
    pass


class GPUDeviceInfo(_DeviceOptions):
    pass


class AscendDeviceInfo(_DeviceOptions):
    pass


class AclOptions(_DeviceOptions):
    pass


class GpuOptions(_DeviceOptions):
    pass


def _constant(value, what):
    """A constant as recorded; "stop" lists become a JSON array string."""
    if isinstance(value, bytearray):
        value = bytes(value)
    if isinstance(value, _CONSTANT_TYPES):
        return value
    raise RegisterError(
        f"{what} is a {_type_name(value)}, which is neither a placeholder (a method input or a "
        "stage output) nor a constant (str, bytes, bool, int, float, numpy array)")


def _stop_value(value, what):
    if isinstance(value, (list, tuple)):
        if not all(isinstance(s, str) for s in value):
            raise RegisterError(f"{what}: a list of stop strings must hold only str")
        return json.dumps(list(value))
    return value


def _ref(method, value, what):
    if isinstance(value, _Placeholder):
        if value._method is not method:
            raise RegisterError(
                f"{what} is {value._what} of method '{value._method.name}', which method "
                f"'{method.name}' cannot use")
        return value._ref
    return ("const", _constant(value, what))


def declare_model(model_file, model_format, with_batch_dim=True, options=None,
                  without_batch_dim_inputs=None, context=None, config_file=None):
    """Declares a model file of this servable (resolved against the version
    folder unless absolute) and returns its Model. model_format "GGUF" (an
    LLM; options are its generation defaults) or "ONNX" (a tensor model;
    options: max_batch_size, max_queue_delay_microseconds, batching)."""
    del context, config_file  # device settings: cairn chooses its own
    ctx = _context()
    if ctx.recording is not None:
        raise RegisterError(
            f"method '{ctx.recording.name}': declare_model() belongs at the top of "
            "servable_config.py, not inside a method")
    if isinstance(model_file, (list, tuple)):
        raise RegisterError(
            "declare_model: model_file is a list of files; cairn serves one file per model "
            "(give a str)")
    if not isinstance(model_file, str) or not model_file:
        raise RegisterError(f"declare_model: model_file must be a file name, not {model_file!r}")
    what = f"declare_model('{model_file}')"
    if not isinstance(model_format, str) or not model_format:
        raise RegisterError(f"{what}: model_format must be a str such as 'GGUF' or 'ONNX'")
    if not isinstance(with_batch_dim, bool):
        raise RegisterError(f"{what}: with_batch_dim must be True or False")
    if without_batch_dim_inputs is None:
        without = []
    elif isinstance(without_batch_dim_inputs, int) and not isinstance(without_batch_dim_inputs, bool):
        without = [without_batch_dim_inputs]
    elif isinstance(without_batch_dim_inputs, (list, tuple)):
        without = list(without_batch_dim_inputs)
    else:
        without = None
    if without is None or any(not isinstance(i, int) or isinstance(i, bool) or i < 0
                              for i in without):
        raise RegisterError(
            f"{what}: without_batch_dim_inputs must be an input index or a list of them")
    recorded = {}
    if isinstance(options, dict):
        for key, value in options.items():
            if not isinstance(key, str):
                raise RegisterError(f"{what}: option names must be str, not {key!r}")
            opt = f"{what}: option '{key}'"
            if key == "stop":
                value = _stop_value(value, opt)
            recorded[key] = _constant(value, opt)
    elif options is not None and not isinstance(options, _DeviceOptions):
        raise RegisterError(f"{what}: options must be a dict, not a {_type_name(options)}")
    path = model_file if os.path.isabs(model_file) else os.path.join(ctx.version_dir, model_file)
    model = Model(ctx, len(ctx.models), model_file, path, model_format.upper(), with_batch_dim,
                  without, recorded)
    ctx.models.append(model)
    return model


def declare_distributed(rank_size, stage_size, with_batch_dim=True, without_batch_dim_inputs=None,
                        options=None, model_file=None):
    """Declares this servable's model as one cut over rank_size agents in
    stage_size pipeline stages (`cairn agent` processes holding the shards,
    joining `cairn serve` at its --distributed-address) and returns its
    Model, a stage of add_stage() like any other. options: the batching
    settings of declare_model's ONNX models (or an LLM's stage options).
    model_file: a GGUF LLM (in the version folder unless absolute) that
    every agent maps, each computing its slice of every layer of its stage;
    the worker reads only its tokenizer and shape. Without it the agents
    hold ONNX shards of their own."""
    ctx = _context()
    what = "declare_servable"
    if ctx.recording is not None:
        raise RegisterError(f"{what}() belongs at the top of servable_config.py, not inside a method")
    for name, value in (("rank_size", rank_size), ("stage_size", stage_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RegisterError(f"{what}: {name} must be a positive int, not {value!r}")
    if rank_size % stage_size != 0:
        raise RegisterError(f"{what}: stage_size {stage_size} does not divide rank_size {rank_size}")
    if any(m.model_format == "DISTRIBUTED" for m in ctx.models):
        raise RegisterError(f"{what}: a servable has at most one distributed model")
    if model_file is not None:
        if not isinstance(model_file, str) or not model_file.lower().endswith(".gguf"):
            raise RegisterError(f"{what}: model_file must name a .gguf file, not {model_file!r}")
        model = declare_model(model_file, "GGUF", with_batch_dim, options, without_batch_dim_inputs)
    else:
        model = declare_model(f"distributed[{rank_size}x{stage_size}]", "ONNX", with_batch_dim,
                              options, without_batch_dim_inputs)
        model.path = ""
    model.model_format = "DISTRIBUTED"
    model.rank_size = rank_size
    model.stage_size = stage_size
    return model


def register_method(output_names):
    """Decorator: records the function as a method whose outputs are named
    `output_names`; the function's parameters are the method's inputs."""
    if isinstance(output_names, str):
        names = [output_names]
    elif isinstance(output_names, (list, tuple)) and all(isinstance(n, str) for n in output_names):
        names = list(output_names)
    else:
        raise RegisterError(
            f"register_method: output_names must be a str or a list of str, not {output_names!r}")
    if not names:
        raise RegisterError("register_method: output_names is empty; a method has outputs")

    def decorate(func):
        name = getattr(func, "__name__", None)
        if not inspect.isfunction(func) or not name:
            raise RegisterError(f"register_method decorates a function, not a {_type_name(func)}")
        inputs = []
        for p in inspect.signature(func).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
                raise RegisterError(
                    f"method '{name}': parameter '{p.name}' is not a plain positional "
                    "parameter; a method's inputs are named positional parameters")
            if p.default is not p.empty:
                raise RegisterError(
                    f"method '{name}': parameter '{p.name}' has a default value; every "
                    "method input must be given")
            inputs.append(p.name)
        ctx = _context()
        if ctx.recording is not None:
            raise RegisterError(
                f"method '{name}' is registered inside method '{ctx.recording.name}'")
        method = _Method(name, inputs, names)
        placeholders = [_Placeholder(method, ("input", i), f"input '{n}'")
                        for i, n in enumerate(inputs)]
        ctx.recording = method
        try:
            result = func(*placeholders)
        except RegisterError:
            raise
        except Exception as e:  # the body's own error, told with the method's name
            raise RegisterError(f"method '{name}': {_type_name(e)}: {e}") from e
        finally:
            ctx.recording = None
            method.open = False
        if result is None:
            raise RegisterError(
                f"method '{name}' returns nothing; it must return its outputs {names} (method "
                "inputs or stage outputs)")
        outs = result if isinstance(result, tuple) else (result,)
        if len(outs) != len(names):
            raise RegisterError(
                f"method '{name}' returns {len(outs)} value(s), but output_names has "
                f"{len(names)} ({', '.join(names)})")
        for out_name, out in zip(names, outs):
            if not isinstance(out, _Placeholder):
                raise RegisterError(
                    f"method '{name}': output '{out_name}' is a {_type_name(out)}, not a method "
                    "input or a stage output")
            if out._method is not method:
                raise RegisterError(
                    f"method '{name}': output '{out_name}' is {out._what} of method "
                    f"'{out._method.name}'")
            method.outputs.append(out._ref)
        ctx.methods.append(method)
        return func

    return decorate


def add_stage(stage, *args, outputs_count=None, batch_size=None, tag=None, **kwargs):
    """Appends a stage to the method being recorded; returns its output
    placeholder, or a tuple of `outputs_count` of them."""
    ctx = _context()
    method = ctx.recording
    if isinstance(stage, _Placeholder):
        kind, name = None, "placeholder"
    elif isinstance(stage, Model):
        kind, name = "model", stage.model_file
    elif callable(stage):
        kind, name = "python", getattr(stage, "__name__", _type_name(stage))
    else:
        kind, name = None, _type_name(stage)
    if method is None:
        raise RegisterError(
            f"add_stage('{name}') is called outside a method; call it inside a function "
            "decorated with @register_method")
    where = f"method '{method.name}' stage {len(method.stages) + 1} ('{name}')"
    if kind is None:
        raise RegisterError(
            f"{where}: the stage is a {name}, not a Python function or a model from "
            "declare_model()")
    if kind == "model" and stage._ctx is not ctx:
        raise RegisterError(f"{where}: the model was declared by another servable's config")
    if outputs_count is None:
        raise RegisterError(f"{where}: outputs_count is missing")
    if isinstance(outputs_count, bool) or not isinstance(outputs_count, int) or outputs_count < 1:
        raise RegisterError(f"{where}: outputs_count must be an int >= 1, not {outputs_count!r}")
    if batch_size is None:
        batch = -1
    elif isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
        raise RegisterError(f"{where}: batch_size must be None, 0 or a positive int, not "
                            f"{batch_size!r}")
    elif kind == "model":
        raise RegisterError(f"{where}: batch_size is for Python stages only")
    else:
        batch = batch_size
    if tag is not None and not isinstance(tag, str):
        raise RegisterError(f"{where}: tag must be a str, not {tag!r}")
    if kwargs and kind == "python":
        raise RegisterError(
            f"{where}: keyword arguments ({', '.join(sorted(kwargs))}) are for model stages "
            "only; give a Python stage its inputs positionally")
    unknown = sorted(set(kwargs) - GENERATION_OPTIONS)
    if unknown:
        raise RegisterError(
            f"{where}: unknown option(s) {', '.join(unknown)}; a model stage takes "
            f"{', '.join(sorted(GENERATION_OPTIONS))}")
    arg_refs = [_ref(method, a, f"{where}: argument {i + 1}") for i, a in enumerate(args)]
    kw_refs = {}
    for key, value in kwargs.items():
        what = f"{where}: option '{key}'"
        if key == "stop":
            value = _stop_value(value, what)
        kw_refs[key] = _ref(method, value, what)
    index = len(method.stages)
    method.stages.append({
        "kind": kind,
        "name": name,
        "function": stage if kind == "python" else None,
        "model": stage._index if kind == "model" else -1,
        "args": arg_refs,
        "kwargs": kw_refs,
        "outputs_count": outputs_count,
        "batch_size": batch,
        "tag": tag or "",
    })
    outs = tuple(_Placeholder(method, ("stage", index, o),
                              f"output {o + 1} of stage {index + 1} ('{name}')")
                 for o in range(outputs_count))
    return outs[0] if outputs_count == 1 else outs


# --- used by the server (python_runtime.cpp) --------------------------------

def _load(servable_name, config_path, version_dir, caller, module_name):
    """Runs config_path as a fresh module named module_name while recording
    into a new context, and returns that context."""
    ctx = _Context(servable_name, version_dir, caller)
    config_dir = os.path.dirname(os.path.abspath(config_path))
    modules_before = set(sys.modules)
    previous = getattr(_local, "ctx", None)
    _local.ctx = ctx
    sys.path.insert(0, config_dir)  # so the config can import its sibling modules
    try:
        spec = importlib.util.spec_from_file_location(module_name, config_path)
        if spec is None or spec.loader is None:
            raise RegisterError(f"{config_path} cannot be loaded as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
    finally:
        _local.ctx = previous
        try:
            sys.path.remove(config_dir)
        except ValueError:
            pass
        # The config's helper modules live on in its functions' globals, not in
        # sys.modules, where another servable's same-named helper would find them.
        prefix = config_dir + os.sep
        for name in set(sys.modules) - modules_before:
            file = getattr(sys.modules.get(name), "__file__", None)
            if name != module_name and file and os.path.abspath(file).startswith(prefix):
                sys.modules.pop(name, None)
    if not ctx.methods:
        raise RegisterError(f"{config_path} registers no method (use @register_method)")
    return ctx


def _unload(module_name):
    """The last stage function of a load is gone: forget its module."""
    sys.modules.pop(module_name, None)


def _describe(exc, config_path):
    """A load failure in one line: the error and where in config_path it was."""
    if isinstance(exc, RegisterError):
        message = str(exc)
    else:
        message = f"{_type_name(exc)}: {exc}"
    chain, e = [], exc
    while e is not None and len(chain) < 16:
        chain.append(e)
        e = e.__cause__ or e.__context__
    target = os.path.abspath(config_path)
    for e in reversed(chain):  # the innermost error is nearest the config's line
        line = None
        tb = e.__traceback__
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == target:
                line = tb.tb_lineno
            tb = tb.tb_next
        if line is not None:
            return f"{message} ({config_path}:{line})"
    return message
