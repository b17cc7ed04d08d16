// servable/python_runtime.cpp — the embedded CPython: start-up, config loading,
// stage calls, value conversions and interruption.
// Owns the GIL discipline: every entry point takes it for exactly as long as
// Python code or a conversion runs, and turns every Python or pybind11 error
// into a Status before returning, so no exception leaves this file. The
// interpreter is never finalized: other threads may still hold Python objects
// (stage functions) when the process exits.
#include "servable/python_runtime.h"

#include <pybind11/embed.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/half.h"

namespace py = pybind11;

namespace cairn::servable {
namespace {

using values::Bytes;
using values::DType;
using values::Tensor;

constexpr size_t kMaxMessageBytes = 1024;

// A conversion or check that failed inside a GIL scope; caught at the edge.
struct StatusError : std::runtime_error {
  explicit StatusError(Status s) : std::runtime_error(s.message()), status(std::move(s)) {}
  Status status;
};

[[noreturn]] void fail(std::string message) {
  throw StatusError(Status::invalid_argument(std::move(message)));
}

// One line, at most kMaxMessageBytes, cut on a UTF-8 character boundary.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > kMaxMessageBytes) {
    size_t cut = kMaxMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
    s.resize(cut);
    s += "...";
  }
  return s;
}

// Objects of the interpreter kept for the process's life (never destroyed:
// the interpreter is never finalized, and destroying them at exit would need
// the GIL).
struct Globals {
  py::object numpy;
  py::object np_generic;
  py::object register_module;
  py::object model_call_error;
};
Globals* g = nullptr;

std::string type_name(py::handle obj) {
  return Py_TYPE(obj.ptr())->tp_name;
}

std::string article(const std::string& word) {
  return (!word.empty() && std::strchr("aeiouAEIOU", word[0])) ? "an " + word : "a " + word;
}

// The Python error `e` as a Status: "<ExceptionType>: <message>", or the
// server's own error when a model.call() failure passed through the stage.
Status python_status(py::error_already_set& e) {
  try {
    py::object value = e.value();
    if (value && py::hasattr(value, "_cairn_code")) {
      const int code = py::cast<int>(value.attr("_cairn_code"));
      if (code > static_cast<int>(StatusCode::Ok) && code <= static_cast<int>(StatusCode::DeadlineExceeded))
        return Status::error(static_cast<StatusCode>(code), one_line(py::str(value)));
    }
    std::string type = "Exception";
    if (e.type()) type = py::cast<std::string>(e.type().attr("__name__"));
    std::string message = value ? std::string(py::str(value)) : std::string();
    return Status::invalid_argument(one_line(message.empty() ? type : type + ": " + message));
  } catch (...) {
    return Status::invalid_argument(one_line(e.what()));
  }
}

// Runs `f` with the GIL held and catches everything it may throw.
template <typename T, typename F>
Result<T> with_gil(F&& f) {
  try {
    py::gil_scoped_acquire gil;
    try {
      return f();
    } catch (py::error_already_set& e) {
      return python_status(e);
    } catch (StatusError& e) {
      return e.status;
    } catch (const std::exception& e) {
      return Status::internal(one_line(std::string("python: ") + e.what()));
    }
  } catch (const std::exception& e) {
    return Status::internal(one_line(std::string("python: ") + e.what()));
  } catch (...) {
    return Status::internal("python: unknown C++ exception");
  }
}

// ---- Value -> Python ----------------------------------------------------------

py::object tensor_to_numpy(const Tensor& t) {
  auto count = Tensor::count_of(t.dtype, t.shape);
  if (!count.is_ok()) fail(count.status().message());
  if (static_cast<uint64_t>(*count) * values::dtype_size(t.dtype) != t.data.size())
    fail("a " + std::string(values::dtype_name(t.dtype)) + " tensor holds " +
         std::to_string(t.data.size()) + " bytes, not what its shape needs");
  // numpy has no bfloat16: such a tensor reaches Python as float32.
  const DType dt = t.dtype == DType::BFloat16 ? DType::Float32 : t.dtype;
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  py::array a(py::dtype(values::dtype_name(dt)), shape);
  if (t.dtype == DType::BFloat16) {
    auto* out = static_cast<float*>(a.mutable_data());
    for (int64_t i = 0; i < *count; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
  } else if (!t.data.empty()) {
    std::memcpy(a.mutable_data(), t.data.data(), t.data.size());
  }
  return a;
}

py::object to_python(const Value& v) {
  struct Visitor {
    py::object operator()(const Tensor& t) const { return tensor_to_numpy(t); }
    py::object operator()(const std::string& s) const {
      PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), "strict");
      if (!o) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(o);
    }
    py::object operator()(const Bytes& b) const { return py::bytes(b.data); }
    py::object operator()(bool b) const { return py::bool_(b); }
    py::object operator()(int64_t i) const { return py::int_(i); }
    py::object operator()(double d) const { return py::float_(d); }
  };
  return std::visit(Visitor{}, v);
}

// ---- Python -> Value ----------------------------------------------------------

// `what` leads the error: "stage 'f' returned" + " a dict, which is not ...".
Value array_to_value(py::array a, const std::string& what) {
  py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  const std::string dt_name = py::str(dt.attr("name"));
  std::optional<DType> out;
  switch (kind) {
    case 'b': out = DType::Bool; break;
    case 'i':
      if (size == 1) out = DType::Int8;
      else if (size == 2) out = DType::Int16;
      else if (size == 4) out = DType::Int32;
      else if (size == 8) out = DType::Int64;
      break;
    case 'u':
      if (size == 1) out = DType::UInt8;
      else if (size == 2) out = DType::UInt16;
      else if (size == 4) out = DType::UInt32;
      else if (size == 8) out = DType::UInt64;
      break;
    case 'f':
      if (size == 2) out = DType::Float16;
      else if (size == 4) out = DType::Float32;
      else if (size == 8) out = DType::Float64;
      break;
    case 'U':
    case 'S':
    case 'O':
      if (a.size() == 1) {  // a str (or bytes) wrapped in an array
        py::object item = a.attr("item")();
        if (PyUnicode_Check(item.ptr())) {
          py::ssize_t n = 0;
          const char* s = PyUnicode_AsUTF8AndSize(item.ptr(), &n);
          if (!s) throw py::error_already_set();
          return std::string(s, static_cast<size_t>(n));
        }
        if (PyBytes_Check(item.ptr())) return Bytes{std::string(py::bytes(item))};
      }
      fail(what + " " + article(dt_name) + " array of " + std::to_string(a.size()) +
           " elements, which is not a tensor (numeric dtypes and bool) or a single str");
    default: break;
  }
  if (!out) fail(what + " " + article(dt_name) + " array, a dtype cairn has no tensor for");
  // C-contiguous and little-endian, whatever the layout it came in.
  py::object le = dt.attr("newbyteorder")("<");
  py::array c = a.attr("astype")(le, py::arg("order") = "C", py::arg("copy") = false);
  if (!(c.flags() & py::array::c_style)) c = g->numpy.attr("ascontiguousarray")(c);
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  std::string data(static_cast<const char*>(c.data()), static_cast<size_t>(c.nbytes()));
  auto t = Tensor::make(*out, std::move(shape), std::move(data));
  if (!t.is_ok()) fail(what + " a tensor that cairn refuses: " + t.status().message());
  return std::move(t).value();
}

Value from_python(py::handle obj, const std::string& what) {
  PyObject* o = obj.ptr();
  if (PyBool_Check(o)) return o == Py_True;
  if (PyUnicode_Check(o)) {
    py::ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) throw py::error_already_set();
    return std::string(s, static_cast<size_t>(n));
  }
  if (PyBytes_Check(o)) return Bytes{std::string(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o))};
  if (PyByteArray_Check(o))
    return Bytes{std::string(PyByteArray_AS_STRING(o), PyByteArray_GET_SIZE(o))};
  if (py::isinstance<py::array>(obj)) return array_to_value(py::reinterpret_borrow<py::array>(obj), what);
  // numpy scalars (np.float32(1) ...) before int and float: np.float64 is a float.
  const int generic = PyObject_IsInstance(o, g->np_generic.ptr());
  if (generic < 0) throw py::error_already_set();
  if (generic == 1) return array_to_value(g->numpy.attr("asarray")(obj), what);
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) fail(what + " an int out of the int64 range");
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return static_cast<int64_t>(v);
  }
  if (PyFloat_Check(o)) return PyFloat_AS_DOUBLE(o);
  fail(what + " " + article(type_name(obj)) +
       ", which is not a tensor, str, bytes, bool, int or float");
}

// outputs_count values from what a stage returned for one instance.
std::vector<Value> split_outputs(py::handle result, int outputs_count, const std::string& stage) {
  const std::string what = "stage '" + stage + "' returned";
  std::vector<Value> out;
  const bool seq = PyTuple_Check(result.ptr()) || (outputs_count > 1 && PyList_Check(result.ptr()));
  if (!seq) {
    if (outputs_count != 1)
      fail(what + " 1 value, outputs_count is " + std::to_string(outputs_count));
    out.push_back(from_python(result, what));
    return out;
  }
  py::sequence s = py::reinterpret_borrow<py::sequence>(result);
  const size_t n = s.size();
  if (n != static_cast<size_t>(outputs_count))
    fail(what + " " + std::to_string(n) + (n == 1 ? " value" : " values") +
         ", outputs_count is " + std::to_string(outputs_count));
  for (size_t i = 0; i < n; ++i)
    out.push_back(from_python(s[i], outputs_count == 1 ? what
                                                       : what + " as output " + std::to_string(i + 1)));
  return out;
}

// ---- objects handed to Python and to the method runner ------------------------

// Serves Model.call() for one load. Holds the caller weakly: the caller (a
// servable version) owns the stage functions, whose globals hold this handle,
// so a strong reference would be a cycle no one frees.
struct CallerHandle {
  std::weak_ptr<ModelCaller> caller;
  bool given = false;

  py::object call(int model, py::tuple args, py::dict kwargs) {
    std::vector<Value> vargs;
    for (size_t i = 0; i < args.size(); ++i) {
      try {
        vargs.push_back(from_python(args[i], "model.call() argument " + std::to_string(i + 1) + " is"));
      } catch (StatusError& e) {
        throw py::type_error(e.status.message());
      }
    }
    std::map<std::string, Value> vkw;
    for (auto [k, v] : kwargs) {
      const std::string key = py::str(k);
      try {
        vkw[key] = from_python(v, "model.call() option '" + key + "' is");
      } catch (StatusError& e) {
        throw py::type_error(e.status.message());
      }
    }
    std::shared_ptr<ModelCaller> c = caller.lock();
    if (!c)
      throw std::runtime_error(given ? "model.call(): the servable version that owned this model is unloaded"
                                     : "model.call(): this servable was loaded without a model runner");
    Result<std::vector<Value>> r = Status::internal("unset");
    {
      py::gil_scoped_release nogil;
      r = c->call_model(model, std::move(vargs), std::move(vkw));
      c.reset();  // the last reference may go here; its destructor takes the GIL itself
    }
    if (!r.is_ok()) {
      py::object exc = g->model_call_error(py::str(r.status().message()));
      exc.attr("_cairn_code") = static_cast<int>(r.status().code());
      PyErr_SetObject(g->model_call_error.ptr(), exc.ptr());
      throw py::error_already_set();
    }
    if (r->size() == 1) return to_python((*r)[0]);
    py::tuple out(r->size());
    for (size_t i = 0; i < r->size(); ++i) out[i] = to_python((*r)[i]);
    return out;
  }
};

// Drops a load's module from sys.modules once its last stage function is gone.
struct LoadHandle {
  std::string module_name;
  explicit LoadHandle(std::string m) : module_name(std::move(m)) {}
  ~LoadHandle() {
    try {
      py::gil_scoped_acquire gil;
      try {
        g->register_module.attr("_unload")(module_name);
      } catch (py::error_already_set&) {
      }
    } catch (...) {
    }
  }
};

class PyFunction final : public PythonFunction {
 public:
  PyFunction(py::object fn, std::string name, std::shared_ptr<LoadHandle> load)
      : fn_(std::move(fn)), name_(std::move(name)), load_(std::move(load)) {}
  ~PyFunction() override {
    try {
      py::gil_scoped_acquire gil;
      fn_ = py::object();
      load_.reset();
    } catch (...) {
      (void)fn_.release();  // no GIL to be had: leak rather than crash
    }
  }
  const std::string& name() const override { return name_; }
  const py::object& fn() const { return fn_; }

 private:
  py::object fn_;
  std::string name_;
  std::shared_ptr<LoadHandle> load_;
};

// An interrupt aimed at a call that already ended must not hit the next one.
void clear_pending_interrupt() { PyThreadState_SetAsyncExc(PyThread_get_thread_ident(), nullptr); }

struct InterruptGuard {
  InterruptGuard() { clear_pending_interrupt(); }
  ~InterruptGuard() { clear_pending_interrupt(); }
};

// ---- reading the recording ----------------------------------------------------

ValueRef read_ref(py::handle ref, const std::string& what) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(ref);
  const std::string kind = py::str(t[0]);
  ValueRef r;
  if (kind == "input") {
    r.source = ValueRef::Source::Input;
    r.index = py::cast<int>(t[1]);
  } else if (kind == "stage") {
    r.source = ValueRef::Source::Stage;
    r.index = py::cast<int>(t[1]);
    r.output = py::cast<int>(t[2]);
  } else {
    r.source = ValueRef::Source::Constant;
    r.constant = from_python(t[1], what + " is");
  }
  return r;
}

ServableConfig read_config(py::handle ctx, const std::string& name, const std::string& version_dir,
                           const std::shared_ptr<LoadHandle>& load) {
  const std::string servable = "servable '" + name + "'";
  ServableConfig c;
  c.name = name;
  c.version_dir = version_dir;
  for (py::handle m : ctx.attr("models")) {
    ModelDecl d;
    d.file = py::str(m.attr("model_file"));
    d.path = py::str(m.attr("path"));
    d.format = py::str(m.attr("model_format"));
    d.with_batch_dim = py::cast<bool>(m.attr("with_batch_dim"));
    d.without_batch_dim_inputs = py::cast<std::vector<int>>(m.attr("without_batch_dim_inputs"));
    if (py::hasattr(m, "rank_size")) {
      d.rank_size = py::cast<int>(m.attr("rank_size"));
      d.stage_size = py::cast<int>(m.attr("stage_size"));
    }
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(m.attr("options"))) {
      const std::string key = py::str(k);
      d.options[key] = from_python(
          v, servable + ": declare_model('" + d.file + "') option '" + key + "' is");
    }
    c.models.push_back(std::move(d));
  }
  for (py::handle m : ctx.attr("methods")) {
    MethodSpec spec;
    spec.name = py::str(m.attr("name"));
    spec.inputs = py::cast<std::vector<std::string>>(m.attr("inputs"));
    spec.output_names = py::cast<std::vector<std::string>>(m.attr("output_names"));
    int index = 0;
    for (py::handle s : m.attr("stages")) {
      StageSpec st;
      st.name = py::str(s["name"]);
      const std::string where = servable + " method '" + spec.name + "' stage " +
                                std::to_string(++index) + " ('" + st.name + "')";
      st.kind = std::string(py::str(s["kind"])) == "model" ? StageSpec::Kind::Model
                                                          : StageSpec::Kind::Python;
      if (st.kind == StageSpec::Kind::Python)
        st.function = std::make_shared<PyFunction>(py::reinterpret_borrow<py::object>(s["function"]),
                                                   st.name, load);
      st.model = py::cast<int>(s["model"]);
      int a = 0;
      for (py::handle ref : s["args"])
        st.args.push_back(read_ref(ref, where + ": argument " + std::to_string(++a)));
      for (auto [k, ref] : py::reinterpret_borrow<py::dict>(s["kwargs"])) {
        const std::string key = py::str(k);
        st.kwargs[key] = read_ref(ref, where + ": option '" + key + "'");
      }
      st.outputs_count = py::cast<int>(s["outputs_count"]);
      st.batch_size = py::cast<int>(s["batch_size"]);
      st.tag = py::str(s["tag"]);
      spec.stages.push_back(std::move(st));
    }
    for (py::handle ref : m.attr("outputs"))
      spec.outputs.push_back(read_ref(ref, servable + " method '" + spec.name + "' output"));
    c.methods.push_back(std::move(spec));
  }
  return c;
}

std::string module_name_for(const std::string& servable) {
  static std::atomic<uint64_t> loads{0};
  std::string s = "cairn_servable_";
  for (char ch : servable.substr(0, 64))
    s += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') ? ch : '_';
  return s + "_" + std::to_string(++loads);
}

std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer (the sanitizer test tree). LeakSanitizer cannot see
// inside Python's own allocator (its arenas are mmapped, so objects reached
// only from there look leaked), and the interpreter, which is never
// finalized, and numpy's start-up keep a few one-time allocations LSan cannot
// trace. Allocations made inside libpython are therefore not reported; this
// file's own C++ allocations still are. Defined here so every binary that
// embeds the runtime gets it without LSAN_OPTIONS.
extern "C" const char* __lsan_default_suppressions() { return "leak:libpython3\n"; }
#endif

Result<PythonRuntime*> PythonRuntime::get() {
  static std::once_flag once;
  static Status* init_status = nullptr;
  static PythonRuntime* runtime = nullptr;
  std::call_once(once, [] {
    Status st;
    try {
      const char* env_dir = std::getenv("CAIRN_PYTHON_DIR");
      const std::string dir = env_dir && *env_dir ? env_dir : CAIRN_PYTHON_DIR;
      const bool started_here = !Py_IsInitialized();
#if defined(__SANITIZE_ADDRESS__)
      // Plain malloc for Python objects, so AddressSanitizer checks them too.
      if (started_here) setenv("PYTHONMALLOC", "malloc", 0);
#endif
      // No Python signal handlers: the server owns SIGINT and SIGTERM; nor
      // the program's folder on sys.path.
      if (started_here) py::initialize_interpreter(false, 0, nullptr, false);
      {
        std::optional<py::gil_scoped_acquire> gil;
        if (!started_here) gil.emplace();
        try {
          py::module_::import("sys").attr("path").attr("insert")(0, dir);
          auto* globals = new Globals();
          try {
            globals->numpy = py::module_::import("numpy");
          } catch (py::error_already_set& e) {
            if (!e.matches(PyExc_ImportError)) throw;
            st = Status::internal("numpy is not installed (Debian: python3-numpy)");
          }
          if (st.is_ok()) {
            globals->np_generic = globals->numpy.attr("generic");
            globals->register_module = py::module_::import("cairn.server.register");
            globals->model_call_error = globals->register_module.attr("ModelCallError");
            py::class_<CallerHandle, std::shared_ptr<CallerHandle>>(globals->register_module,
                                                                    "_ModelCaller")
                .def("call", &CallerHandle::call);
            g = globals;
          }
        } catch (py::error_already_set& e) {
          st = Status::internal("python: cannot start the servable runtime (python dir " + dir +
                                "): " + python_status(e).message());
        }
      }
      // Release the GIL, keeping the main thread state, so any thread may take it.
      if (started_here) PyEval_SaveThread();
    } catch (const std::exception& e) {
      st = Status::internal(one_line(std::string("python: cannot start the interpreter: ") + e.what()));
    }
    if (st.is_ok()) runtime = new PythonRuntime();
    else init_status = new Status(st);
  });
  if (!runtime) return *init_status;
  return runtime;
}

Result<ServableConfig> PythonRuntime::load_config(const std::string& servable_name,
                                                  const std::string& config_path,
                                                  const std::string& version_dir,
                                                  std::shared_ptr<ModelCaller> caller) {
  const std::string servable = "servable '" + servable_name + "'";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec))
    return Status::not_found(servable + ": no config file at " + config_path);
  // One load at a time: sys.path and sys.modules are shared by all of them.
  std::lock_guard<std::mutex> lock(load_mutex());
  auto handle = std::make_shared<CallerHandle>();
  handle->caller = caller;
  handle->given = caller != nullptr;
  return with_gil<ServableConfig>([&]() -> Result<ServableConfig> {
    const std::string module = module_name_for(servable_name);
    py::object ctx;
    try {
      ctx = g->register_module.attr("_load")(servable_name, config_path, version_dir,
                                              py::cast(handle), module);
    } catch (py::error_already_set& e) {
      std::string message;
      try {
        message = py::str(g->register_module.attr("_describe")(e.value(), config_path));
      } catch (py::error_already_set&) {
        message = python_status(e).message();
      }
      return Status::invalid_argument(one_line(servable + ": " + message));
    }
    auto load = std::make_shared<LoadHandle>(module);
    ServableConfig config;
    try {
      config = read_config(ctx, servable_name, version_dir, load);
    } catch (StatusError& e) {
      return e.status;
    }
    add_embed_methods(config);
    CAIRN_RETURN_IF_ERROR(validate(config));
    ctx.attr("loading") = false;  // model.call() may run from now on
    return config;
  });
}

Result<std::vector<Value>> PythonRuntime::call(const PythonFunction& fn,
                                               const std::vector<Value>& args, int outputs_count) {
  const auto* pf = dynamic_cast<const PyFunction*>(&fn);
  if (!pf) return Status::internal("stage '" + fn.name() + "' is not a Python function of this runtime");
  if (outputs_count < 1) return Status::invalid_argument("stage '" + fn.name() + "': outputs_count < 1");
  return with_gil<std::vector<Value>>([&]() -> Result<std::vector<Value>> {
    InterruptGuard guard;
    py::tuple pargs(args.size());
    for (size_t i = 0; i < args.size(); ++i) pargs[i] = to_python(args[i]);
    py::object result = pf->fn()(*pargs);
    return split_outputs(result, outputs_count, fn.name());
  });
}

Result<std::vector<std::vector<Value>>> PythonRuntime::call_batched(
    const PythonFunction& fn, const std::vector<std::vector<Value>>& instances, int outputs_count) {
  using Out = std::vector<std::vector<Value>>;
  const auto* pf = dynamic_cast<const PyFunction*>(&fn);
  if (!pf) return Status::internal("stage '" + fn.name() + "' is not a Python function of this runtime");
  if (outputs_count < 1) return Status::invalid_argument("stage '" + fn.name() + "': outputs_count < 1");
  if (instances.empty()) return Out{};
  return with_gil<Out>([&]() -> Result<Out> {
    InterruptGuard guard;
    py::list batch(instances.size());
    for (size_t i = 0; i < instances.size(); ++i) {
      py::tuple inst(instances[i].size());
      for (size_t j = 0; j < instances[i].size(); ++j) inst[j] = to_python(instances[i][j]);
      batch[i] = std::move(inst);
    }
    py::object result = pf->fn()(batch);
    const std::string stage = "stage '" + fn.name() + "'";
    if (!py::isinstance<py::iterable>(result))
      fail(stage + " returned " + article(type_name(result)) +
           ", not a list or generator of one result per instance");
    Out out;
    for (py::handle item : result) {
      if (out.size() == instances.size())
        fail(stage + " returned more than " + std::to_string(instances.size()) +
             " results for " + std::to_string(instances.size()) + " instances");
      out.push_back(split_outputs(item, outputs_count, fn.name()));
    }
    if (out.size() != instances.size())
      fail(stage + " returned " + std::to_string(out.size()) +
           (out.size() == 1 ? " result" : " results") + " for " +
           std::to_string(instances.size()) + " instances");
    return out;
  });
}

unsigned long PythonRuntime::current_thread_id() { return PyThread_get_thread_ident(); }

void PythonRuntime::interrupt(unsigned long thread_id) {
  try {
    py::gil_scoped_acquire gil;
    PyThreadState_SetAsyncExc(thread_id, PyExc_TimeoutError);
  } catch (...) {
  }
}

}  // namespace cairn::servable
