// PythonRuntime: recording servable_config.py files with the register API,
// calling Python stages (one instance and batched), value conversions both
// ways, model.call() through a ModelCaller, load errors, threads and interrupt().
#include "servable/python_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/half.h"
#include "test_util.h"

namespace cairn::servable {
namespace {

namespace fs = std::filesystem;
using values::Bytes;
using values::DType;
using values::Tensor;

PythonRuntime* rt() {
  auto r = PythonRuntime::get();
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : nullptr;
}

// A servable folder with servable_config.py (and optional sibling files).
fs::path write_config(const std::string& name, const std::string& config,
                      const std::map<std::string, std::string>& extra = {}) {
  fs::path dir = test::temp_dir("python_runtime_" + name);
  std::ofstream(dir / "servable_config.py") << config;
  for (const auto& [file, text] : extra) std::ofstream(dir / file) << text;
  return dir;
}

Result<ServableConfig> load(const std::string& name, const fs::path& dir,
                            std::shared_ptr<ModelCaller> caller = nullptr) {
  return rt()->load_config(name, (dir / "servable_config.py").string(), (dir / "1").string(),
                           std::move(caller));
}

ServableConfig load_ok(const std::string& name, const std::string& config,
                       std::shared_ptr<ModelCaller> caller = nullptr) {
  auto r = load(name, write_config(name, config), std::move(caller));
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r).value() : ServableConfig{};
}

std::string load_error(const std::string& name, const std::string& config) {
  auto r = load(name, write_config(name, config));
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? std::string() : r.status().message();
}

const MethodSpec& method(const ServableConfig& c, const std::string& name) {
  for (const auto& m : c.methods)
    if (m.name == name) return m;
  static MethodSpec none;
  ADD_FAILURE() << "no method " << name;
  return none;
}

std::vector<float> floats(const Value& v) {
  const auto* t = std::get_if<Tensor>(&v);
  if (!t || t->dtype != DType::Float32) {
    ADD_FAILURE() << "not a float32 tensor: " << values::describe(v);
    return {};
  }
  return std::vector<float>(t->as<float>(), t->as<float>() + t->element_count());
}

Tensor ft(std::vector<float> data, std::vector<int64_t> shape) {
  return values::make_tensor(data, std::move(shape));
}

const char* kHeader = "import numpy as np\nfrom cairn.server import register\n\n";

// Stages of every shape the conversion tests need, in one servable.
const char* kStagesConfig = R"(
import numpy as np
from cairn.server import register

def ident(x):
    return x

def add(x1, x2):
    return x1 + x2

def const_of(kind):
    return {
        "dict": {"a": 1},
        "big": 2 ** 70,
        "np_f32": np.float32(1.5),
        "np_f64": np.float64(2.5),
        "np_bool": np.bool_(True),
        "str_arr": np.array("hi"),
        "str_arr2": np.array(["a", "b"]),
        "bytes_arr": np.array([b"xy"]),
        "big_endian_t": np.arange(6, dtype=">i4").reshape(2, 3).T,
        "bytearray": bytearray(b"ab"),
        "complex": np.zeros(2, dtype=np.complex64),
        "list": [1, 2],
        "empty": np.zeros((0, 3), dtype=np.float32),
    }[kind]

def three(x):
    return 1, 2, 3

def one_tuple(x):
    return (x,)

def bad(x):
    raise ValueError("bad x")

def long_error(x):
    raise RuntimeError("line1\nline2 " + "y" * 5000)

SPIN = {"running": False}

def spin(x):
    SPIN["running"] = True
    while True:
        pass

def spinning(x):
    return SPIN["running"]

def adder_gen(instances):
    for x1, x2 in instances:
        yield x1 + x2, x1 * 2

def short_batch(instances):
    return [instances[0][0]]

def not_iterable(instances):
    return 5

@register.register_method(output_names=["y"])
def m_ident(x):
    return register.add_stage(ident, x, outputs_count=1)

@register.register_method(output_names=["y"])
def m_add(x1, x2):
    y = register.add_stage(add, x1, x2, outputs_count=1)
    return y

@register.register_method(output_names=["y"])
def m_const(k):
    return register.add_stage(const_of, k, outputs_count=1)

@register.register_method(output_names=["a", "b"])
def m_three(x):
    a, b = register.add_stage(three, x, outputs_count=2)
    return a, b

@register.register_method(output_names=["y"])
def m_one_tuple(x):
    return register.add_stage(one_tuple, x, outputs_count=1)

@register.register_method(output_names=["y"])
def m_bad(x):
    return register.add_stage(bad, x, outputs_count=1)

@register.register_method(output_names=["y"])
def m_spin(x):
    return register.add_stage(spin, x, outputs_count=1)

@register.register_method(output_names=["y"])
def m_spinning(x):
    return register.add_stage(spinning, x, outputs_count=1)

@register.register_method(output_names=["y"])
def m_long_error(x):
    return register.add_stage(long_error, x, outputs_count=1)

@register.register_method(output_names=["s", "d"])
def m_batch(x1, x2):
    s, d = register.add_stage(adder_gen, x1, x2, outputs_count=2, batch_size=2)
    return s, d

@register.register_method(output_names=["y"])
def m_short(x):
    return register.add_stage(short_batch, x, outputs_count=1, batch_size=0)

@register.register_method(output_names=["y"])
def m_not_iterable(x):
    return register.add_stage(not_iterable, x, outputs_count=1, batch_size=0)
)";

struct Stages {
  ServableConfig config;
  const PythonFunction& fn(const std::string& m) const {
    return *method(config, m).stages.at(0).function;
  }
};

const Stages& stages() {
  static Stages* s = [] {
    auto* st = new Stages();
    st->config = load_ok("stages", kStagesConfig);
    return st;
  }();
  return *s;
}

TEST(PythonRuntime, StartsOnceWithNumpy) {
  auto a = PythonRuntime::get();
  auto b = PythonRuntime::get();
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(*a, *b);
}

TEST(PythonRuntime, RecordsTwoMethodsAndCallsTheirStages) {
  ServableConfig c = load_ok("two", std::string(kHeader) + R"(
def add(x1, x2):
    return x1 + x2

def scale(x, k):
    return x * k, float(x.sum())

@register.register_method(output_names=["y"])
def add_common(x1, x2):
    y = register.add_stage(add, x1, x2, outputs_count=1)
    return y

@register.register_method(output_names=["scaled", "total"])
def scale_sum(x):
    y = register.add_stage(add, x, x, outputs_count=1)
    scaled, total = register.add_stage(scale, y, 3.0, outputs_count=2)
    return scaled, total
)");
  ASSERT_EQ(c.methods.size(), 2u);
  EXPECT_EQ(c.name, "two");
  const auto& m1 = method(c, "add_common");
  EXPECT_EQ(m1.inputs, (std::vector<std::string>{"x1", "x2"}));
  EXPECT_EQ(m1.output_names, (std::vector<std::string>{"y"}));
  ASSERT_EQ(m1.stages.size(), 1u);
  EXPECT_EQ(m1.stages[0].kind, StageSpec::Kind::Python);
  EXPECT_EQ(m1.stages[0].name, "add");
  EXPECT_EQ(m1.stages[0].batch_size, StageSpec::kOneInstance);
  ASSERT_EQ(m1.stages[0].args.size(), 2u);
  EXPECT_EQ(m1.stages[0].args[1].source, ValueRef::Source::Input);
  EXPECT_EQ(m1.stages[0].args[1].index, 1);
  ASSERT_EQ(m1.outputs.size(), 1u);
  EXPECT_EQ(m1.outputs[0].source, ValueRef::Source::Stage);

  const auto& m2 = method(c, "scale_sum");
  ASSERT_EQ(m2.stages.size(), 2u);
  EXPECT_EQ(m2.stages[1].outputs_count, 2);
  EXPECT_EQ(m2.stages[1].args[0].source, ValueRef::Source::Stage);
  EXPECT_EQ(m2.stages[1].args[0].index, 0);
  EXPECT_EQ(m2.stages[1].args[1].source, ValueRef::Source::Constant);
  EXPECT_EQ(std::get<double>(m2.stages[1].args[1].constant), 3.0);
  ASSERT_EQ(m2.outputs.size(), 2u);
  EXPECT_EQ(m2.outputs[1].index, 1);
  EXPECT_EQ(m2.outputs[1].output, 1);
  EXPECT_TRUE(validate(c).is_ok());

  auto r = rt()->call(*m1.stages[0].function,
                      {ft({1.f, 2.f, 3.f}, {3}), ft({10.f, 20.f, 30.f}, {3})},
                      1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(floats((*r)[0]), (std::vector<float>{11.f, 22.f, 33.f}));
  EXPECT_EQ(std::get<Tensor>((*r)[0]).shape, (std::vector<int64_t>{3}));

  auto s = rt()->call(*m2.stages[1].function, {ft({1.f, 2.f}, {2}), 3.0}, 2);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(floats((*s)[0]), (std::vector<float>{3.f, 6.f}));
  EXPECT_EQ(std::get<double>((*s)[1]), 3.0);  // the sum of x itself
}

TEST(PythonRuntime, EveryDTypeRoundTrips) {
  const auto& ident = stages().fn("m_ident");
  for (DType dt : values::kAllDTypes) {
    SCOPED_TRACE(values::dtype_name(dt));
    const size_t n = 6, es = values::dtype_size(dt);
    std::string data(n * es, '\0');
    for (size_t i = 0; i < n; ++i) {
      if (dt == DType::Bool) data[i] = i % 2;
      else if (dt == DType::Float32) { float f = 1.5f * i - 2; std::memcpy(&data[i * 4], &f, 4); }
      else if (dt == DType::Float64) { double d = 0.25 * i - 1; std::memcpy(&data[i * 8], &d, 8); }
      else if (dt == DType::Float16) { uint16_t h = f32_to_f16(0.5f * i); std::memcpy(&data[i * 2], &h, 2); }
      else if (dt == DType::BFloat16) { uint16_t h = f32_to_bf16(-1.0f * i); std::memcpy(&data[i * 2], &h, 2); }
      else for (size_t b = 0; b < es; ++b) data[i * es + b] = static_cast<char>(0x80 + 7 * i + b);
    }
    auto t = Tensor::make(dt, {2, 3}, data);
    ASSERT_TRUE(t.is_ok());
    auto r = rt()->call(ident, {*t}, 1);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const auto& back = std::get<Tensor>((*r)[0]);
    if (dt == DType::BFloat16) {  // numpy has none: Python sees float32
      EXPECT_EQ(floats(back), (std::vector<float>{0.f, -1.f, -2.f, -3.f, -4.f, -5.f}));
    } else {
      EXPECT_EQ(back, *t);
    }
  }
  // A 0-d tensor stays 0-d.
  auto zero = Tensor::make(DType::Int32, {}, std::string("\x05\x00\x00\x00", 4));
  ASSERT_TRUE(zero.is_ok());
  auto r = rt()->call(ident, {*zero}, 1);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(std::get<Tensor>((*r)[0]), *zero);
  // A tensor whose bytes do not match its shape is refused, not read past.
  Tensor broken{DType::Float32, {4}, std::string(8, '\0')};
  auto b = rt()->call(ident, {broken}, 1);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("bytes"), std::string::npos) << b.status().message();
}

TEST(PythonRuntime, ScalarsRoundTrip) {
  const auto& ident = stages().fn("m_ident");
  const std::vector<Value> vs = {std::string("héllo"), Bytes{std::string("a\0b", 3)}, true, false,
                                 int64_t{-1} << 62, 2.5};
  for (const Value& v : vs) {
    auto r = rt()->call(ident, {v}, 1);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ((*r)[0], v) << values::describe(v);
  }
  // A str that is not UTF-8 fails as an error, not a crash.
  auto bad = rt()->call(ident, {std::string("\xff\xfe")}, 1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("UnicodeDecodeError"), std::string::npos);
}

Result<Value> const_of(const std::string& kind) {
  auto r = rt()->call(stages().fn("m_const"), {kind}, 1);
  if (!r.is_ok()) return r.status();
  return (*r)[0];
}

TEST(PythonRuntime, PythonResultsConvert) {
  auto f32 = const_of("np_f32");
  ASSERT_TRUE(f32.is_ok()) << f32.status().message();
  EXPECT_EQ(std::get<Tensor>(*f32), ft({1.5f}, {}));
  auto f64 = const_of("np_f64");  // a numpy scalar, though also a Python float
  ASSERT_TRUE(f64.is_ok());
  EXPECT_EQ(std::get<Tensor>(*f64).dtype, DType::Float64);
  EXPECT_TRUE(std::get<Tensor>(*f64).shape.empty());
  auto nb = const_of("np_bool");
  ASSERT_TRUE(nb.is_ok());
  EXPECT_EQ(std::get<Tensor>(*nb).dtype, DType::Bool);
  auto s = const_of("str_arr");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(std::get<std::string>(*s), "hi");
  auto by = const_of("bytes_arr");
  ASSERT_TRUE(by.is_ok());
  EXPECT_EQ(std::get<Bytes>(*by).data, "xy");
  auto ba = const_of("bytearray");
  ASSERT_TRUE(ba.is_ok());
  EXPECT_EQ(std::get<Bytes>(*ba).data, "ab");
  auto t = const_of("big_endian_t");  // transposed and big-endian: made C-order little-endian
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(std::get<Tensor>(*t), values::make_tensor(std::vector<int32_t>{0, 3, 1, 4, 2, 5}, {3, 2}));
  auto e = const_of("empty");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(std::get<Tensor>(*e).shape, (std::vector<int64_t>{0, 3}));

  auto d = const_of("dict");
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().message(),
            "stage 'const_of' returned a dict, which is not a tensor, str, bytes, bool, int or float");
  auto l = const_of("list");
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find("a list, which is not"), std::string::npos);
  auto big = const_of("big");
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("int64 range"), std::string::npos);
  auto s2 = const_of("str_arr2");
  ASSERT_FALSE(s2.is_ok());
  EXPECT_NE(s2.status().message().find("str32 array of 2 elements"), std::string::npos)
      << s2.status().message();
  auto cx = const_of("complex");
  ASSERT_FALSE(cx.is_ok());
  EXPECT_NE(cx.status().message().find("complex64"), std::string::npos) << cx.status().message();
}

TEST(PythonRuntime, OutputCountsAreChecked) {
  auto r = rt()->call(stages().fn("m_three"), {int64_t{1}}, 2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "stage 'three' returned 3 values, outputs_count is 2");
  auto one = rt()->call(stages().fn("m_ident"), {int64_t{1}}, 2);
  ASSERT_FALSE(one.is_ok());
  EXPECT_EQ(one.status().message(), "stage 'ident' returned 1 value, outputs_count is 2");
  auto t = rt()->call(stages().fn("m_one_tuple"), {int64_t{4}}, 1);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(std::get<int64_t>((*t)[0]), 4);
}

TEST(PythonRuntime, PythonExceptionBecomesStatus) {
  auto r = rt()->call(stages().fn("m_bad"), {int64_t{1}}, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(r.status().message(), "ValueError: bad x");
  // A long, multi-line message comes back as one line of about 1 KB.
  auto l = rt()->call(stages().fn("m_long_error"), {int64_t{1}}, 1);
  ASSERT_FALSE(l.is_ok());
  EXPECT_EQ(l.status().message().rfind("RuntimeError: line1 line2 yyy", 0), 0u) << l.status().message();
  EXPECT_LE(l.status().message().size(), 1030u);
  EXPECT_EQ(l.status().message().find('\n'), std::string::npos);
  // The runtime goes on working.
  EXPECT_TRUE(rt()->call(stages().fn("m_ident"), {int64_t{1}}, 1).is_ok());
}

TEST(PythonRuntime, BatchedStage) {
  const auto& spec = method(stages().config, "m_batch").stages.at(0);
  EXPECT_EQ(spec.batch_size, 2);
  EXPECT_EQ(method(stages().config, "m_short").stages.at(0).batch_size, 0);
  auto r = rt()->call_batched(*spec.function,
                              {{ft({1.f, 2.f}, {2}), ft({3.f, 4.f}, {2})},
                               {ft({5.f}, {1}), ft({6.f}, {1})}},
                              2);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(floats((*r)[0][0]), (std::vector<float>{4.f, 6.f}));
  EXPECT_EQ(floats((*r)[0][1]), (std::vector<float>{2.f, 4.f}));
  EXPECT_EQ(floats((*r)[1][0]), (std::vector<float>{11.f}));
  EXPECT_EQ(floats((*r)[1][1]), (std::vector<float>{10.f}));

  auto s = rt()->call_batched(stages().fn("m_short"), {{int64_t{1}}, {int64_t{2}}}, 1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().message(), "stage 'short_batch' returned 1 result for 2 instances");
  auto n = rt()->call_batched(stages().fn("m_not_iterable"), {{int64_t{1}}}, 1);
  ASSERT_FALSE(n.is_ok());
  EXPECT_NE(n.status().message().find("returned an int, not a list"), std::string::npos)
      << n.status().message();
  auto e = rt()->call_batched(stages().fn("m_short"), {}, 1);
  ASSERT_TRUE(e.is_ok());
  EXPECT_TRUE(e->empty());
}

TEST(PythonRuntime, RecordingErrorsNameServableMethodAndStage) {
  std::string e = load_error("bad_count", std::string(kHeader) + R"(
def f(x):
    return x

@register.register_method(output_names=["y"])
def m(x):
    return register.add_stage(f, x, outputs_count=0)
)");
  EXPECT_NE(e.find("servable 'bad_count'"), std::string::npos) << e;
  EXPECT_NE(e.find("method 'm' stage 1 ('f'): outputs_count must be an int >= 1"), std::string::npos) << e;
  EXPECT_NE(e.find("servable_config.py:10)"), std::string::npos) << e;

  e = load_error("missing_count", std::string(kHeader) + R"(
def f(x):
    return x

@register.register_method(output_names=["y"])
def m(x):
    return register.add_stage(f, x)
)");
  EXPECT_NE(e.find("method 'm' stage 1 ('f'): outputs_count is missing"), std::string::npos) << e;

  // Unpacking one output as two.
  e = load_error("unpack", std::string(kHeader) + R"(
def f(x):
    return x

@register.register_method(output_names=["a", "b"])
def m(x):
    a, b = register.add_stage(f, x, outputs_count=1)
    return a, b
)");
  EXPECT_NE(e.find("servable 'unpack': method 'm': output 1 of stage 1 ('f') is a placeholder"),
            std::string::npos) << e;

  e = load_error("nouts", std::string(kHeader) + R"(
def f(x):
    return x

@register.register_method(output_names=["a", "b"])
def m(x):
    return register.add_stage(f, x, outputs_count=1)
)");
  EXPECT_NE(e.find("method 'm' returns 1 value(s), but output_names has 2"), std::string::npos) << e;

  e = load_error("defaults", std::string(kHeader) + R"(
@register.register_method(output_names=["a"])
def m(x, y=1):
    return x
)");
  EXPECT_NE(e.find("parameter 'y' has a default value"), std::string::npos) << e;

  e = load_error("varargs", std::string(kHeader) + R"(
@register.register_method(output_names=["a"])
def m(*xs):
    return xs
)");
  EXPECT_NE(e.find("parameter 'xs' is not a plain positional parameter"), std::string::npos) << e;

  e = load_error("body_error", std::string(kHeader) + R"(
@register.register_method(output_names=["a"])
def m(x):
    return undefined_name
)");
  EXPECT_NE(e.find("method 'm': NameError: name 'undefined_name' is not defined"), std::string::npos) << e;
  EXPECT_NE(e.find("servable_config.py:7)"), std::string::npos) << e;

  e = load_error("nomethod", std::string(kHeader) + "x = 1\n");
  EXPECT_NE(e.find("registers no method"), std::string::npos) << e;
}

TEST(PythonRuntime, ArgumentKindsAreChecked) {
  std::string e = load_error("dict_arg", std::string(kHeader) + R"(
def f(x, d):
    return x

@register.register_method(output_names=["y"])
def m(x):
    return register.add_stage(f, x, {"a": 1}, outputs_count=1)
)");
  EXPECT_NE(e.find("method 'm' stage 1 ('f'): argument 2 is a dict, which is neither a placeholder"),
            std::string::npos) << e;

  e = load_error("other_method", std::string(kHeader) + R"(
def f(x):
    return x
saved = []

@register.register_method(output_names=["y"])
def a(x):
    saved.append(x)
    return register.add_stage(f, x, outputs_count=1)

@register.register_method(output_names=["y"])
def b(z):
    return register.add_stage(f, saved[0], outputs_count=1)
)");
  EXPECT_NE(e.find("method 'b' stage 1 ('f'): argument 1 is input 'x' of method 'a', which method 'b' cannot use"),
            std::string::npos) << e;

  e = load_error("outside", std::string(kHeader) + R"(
def f(x):
    return x
register.add_stage(f, 1, outputs_count=1)
)");
  EXPECT_NE(e.find("add_stage('f') is called outside a method"), std::string::npos) << e;

  e = load_error("not_stage", std::string(kHeader) + R"(
@register.register_method(output_names=["y"])
def m(x):
    return register.add_stage(42, x, outputs_count=1)
)");
  EXPECT_NE(e.find("the stage is a int, not a Python function"), std::string::npos) << e;

  e = load_error("arith", std::string(kHeader) + R"(
@register.register_method(output_names=["y"])
def m(x):
    return x + 1
)");
  EXPECT_NE(e.find("method 'm': input 'x' is a placeholder"), std::string::npos) << e;

  // Constants of every kind are recorded as values.
  ServableConfig c = load_ok("constants", std::string(kHeader) + R"(
def f(*args):
    return args[0]

@register.register_method(output_names=["y"])
def m(x):
    return register.add_stage(f, x, "s", b"b", True, 3, 2.5, np.array([1, 2], dtype=np.int32),
                              np.float16(1), outputs_count=1)
)");
  const auto& args = method(c, "m").stages.at(0).args;
  ASSERT_EQ(args.size(), 8u);
  for (size_t i = 1; i < args.size(); ++i) EXPECT_EQ(args[i].source, ValueRef::Source::Constant);
  EXPECT_EQ(std::get<std::string>(args[1].constant), "s");
  EXPECT_EQ(std::get<Bytes>(args[2].constant).data, "b");
  EXPECT_EQ(std::get<bool>(args[3].constant), true);
  EXPECT_EQ(std::get<int64_t>(args[4].constant), 3);
  EXPECT_EQ(std::get<double>(args[5].constant), 2.5);
  EXPECT_EQ(std::get<Tensor>(args[6].constant), values::make_tensor(std::vector<int32_t>{1, 2}, {2}));
  EXPECT_EQ(std::get<Tensor>(args[7].constant).dtype, DType::Float16);
}

TEST(PythonRuntime, SyntaxErrorNamesTheFile) {
  std::string e = load_error("syntax", std::string(kHeader) + "def broken(:\n    pass\n");
  EXPECT_NE(e.find("servable 'syntax': SyntaxError"), std::string::npos) << e;
  EXPECT_NE(e.find("servable_config.py"), std::string::npos) << e;
  EXPECT_NE(e.find("line 4"), std::string::npos) << e;
  auto missing = rt()->load_config("missing", "/nonexistent/servable_config.py", "/nonexistent/1", nullptr);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);
}

TEST(PythonRuntime, ModelStageWithOptions) {
  fs::path dir = write_config("model_stage", std::string(kHeader) + R"(
model = register.declare_model("tiny.gguf", "gguf", options={"temperature": 0.5, "stop": ["a", "b"]},
                               context=register.Context(thread_num=4))
abs_model = register.declare_model("/models/x.gguf", "GGUF", with_batch_dim=False,
                                   without_batch_dim_inputs=[1],
                                   options=register.GpuOptions(precision_mode="fp16"))

@register.register_method(output_names=["text"])
def generate(prompt, temperature):
    return register.add_stage(model, prompt, max_tokens=8, temperature=temperature, stop=["x"],
                              outputs_count=1)
)");
  auto r = load("model_stage", dir);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->models.size(), 2u);
  const ModelDecl& m = r->models[0];
  EXPECT_EQ(m.file, "tiny.gguf");
  EXPECT_EQ(m.path, (dir / "1" / "tiny.gguf").string());
  EXPECT_EQ(m.format, "GGUF");
  EXPECT_TRUE(m.with_batch_dim);
  EXPECT_EQ(std::get<double>(m.options.at("temperature")), 0.5);
  EXPECT_EQ(std::get<std::string>(m.options.at("stop")), R"(["a", "b"])");
  EXPECT_EQ(r->models[1].path, "/models/x.gguf");
  EXPECT_FALSE(r->models[1].with_batch_dim);
  EXPECT_EQ(r->models[1].without_batch_dim_inputs, (std::vector<int>{1}));
  EXPECT_TRUE(r->models[1].options.empty());
  const StageSpec& st = method(*r, "generate").stages.at(0);
  EXPECT_EQ(st.kind, StageSpec::Kind::Model);
  EXPECT_EQ(st.model, 0);
  EXPECT_EQ(st.name, "tiny.gguf");
  EXPECT_FALSE(st.function);
  ASSERT_EQ(st.kwargs.size(), 3u);
  EXPECT_EQ(std::get<int64_t>(st.kwargs.at("max_tokens").constant), 8);
  EXPECT_EQ(st.kwargs.at("temperature").source, ValueRef::Source::Input);
  EXPECT_EQ(st.kwargs.at("temperature").index, 1);
  EXPECT_EQ(std::get<std::string>(st.kwargs.at("stop").constant), R"(["x"])");

  std::string e = load_error("bad_kwarg", std::string(kHeader) + R"(
model = register.declare_model("tiny.gguf", "GGUF")

@register.register_method(output_names=["text"])
def generate(prompt):
    return register.add_stage(model, prompt, max_tokens=8, temprature=0.1, outputs_count=1)
)");
  EXPECT_NE(e.find("method 'generate' stage 1 ('tiny.gguf'): unknown option(s) temprature"),
            std::string::npos) << e;
  e = load_error("py_kwarg", std::string(kHeader) + R"(
def f(x):
    return x

@register.register_method(output_names=["y"])
def m(x):
    return register.add_stage(f, x, max_tokens=3, outputs_count=1)
)");
  EXPECT_NE(e.find("stage 1 ('f'): keyword arguments (max_tokens) are for model stages only"),
            std::string::npos) << e;
  e = load_error("list_model", std::string(kHeader) + R"(
model = register.declare_model(["a.gguf", "b.gguf"], "GGUF")
)");
  EXPECT_NE(e.find("model_file is a list"), std::string::npos) << e;
}

// Records what model.call() passed and answers with fixed outputs.
class FakeCaller : public ModelCaller {
 public:
  Result<std::vector<Value>> call_model(int model, std::vector<Value> args,
                                        std::map<std::string, Value> kwargs) override {
    std::lock_guard<std::mutex> lock(mu);
    calls++;
    last_model = model;
    last_args = std::move(args);
    last_kwargs = std::move(kwargs);
    if (fail) return Status::unavailable("model is draining");
    return std::vector<Value>{std::string("hello"), int64_t{7}};
  }
  std::mutex mu;
  int calls = 0;
  int last_model = -1;
  std::vector<Value> last_args;
  std::map<std::string, Value> last_kwargs;
  bool fail = false;
};

TEST(PythonRuntime, ModelCallReachesTheCaller) {
  auto caller = std::make_shared<FakeCaller>();
  ServableConfig c = load_ok("model_call", std::string(kHeader) + R"(
other = register.declare_model("other.gguf", "GGUF")
model = register.declare_model("tiny.gguf", "GGUF")

def gen(prompt):
    text, n = model.call(prompt, np.array([1, 2], dtype=np.int64), max_tokens=4, stop="x")
    return text + "!", n + 1

@register.register_method(output_names=["text", "n"])
def generate(prompt):
    return register.add_stage(gen, prompt, outputs_count=2)
)",
                             caller);
  const auto& fn = *method(c, "generate").stages.at(0).function;
  auto r = rt()->call(fn, {std::string("p")}, 2);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(std::get<std::string>((*r)[0]), "hello!");
  EXPECT_EQ(std::get<int64_t>((*r)[1]), 8);
  EXPECT_EQ(caller->last_model, 1);
  ASSERT_EQ(caller->last_args.size(), 2u);
  EXPECT_EQ(std::get<std::string>(caller->last_args[0]), "p");
  EXPECT_EQ(std::get<Tensor>(caller->last_args[1]), values::make_tensor(std::vector<int64_t>{1, 2}, {2}));
  EXPECT_EQ(std::get<int64_t>(caller->last_kwargs.at("max_tokens")), 4);
  EXPECT_EQ(std::get<std::string>(caller->last_kwargs.at("stop")), "x");

  // The caller's failure keeps its kind through the stage.
  caller->fail = true;
  auto f = rt()->call(fn, {std::string("p")}, 2);
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::Unavailable);
  EXPECT_EQ(f.status().message(), "model is draining");

  // The caller is held weakly: once it is gone, model.call() fails cleanly.
  caller.reset();
  auto gone = rt()->call(fn, {std::string("p")}, 2);
  ASSERT_FALSE(gone.is_ok());
  EXPECT_NE(gone.status().message().find("unloaded"), std::string::npos) << gone.status().message();

  // Loaded without a caller: model.call() says so.
  ServableConfig none = load_ok("no_caller", std::string(kHeader) + R"(
model = register.declare_model("tiny.gguf", "GGUF")

def gen(prompt):
    return model.call(prompt)

@register.register_method(output_names=["text"])
def generate(prompt):
    return register.add_stage(gen, prompt, outputs_count=1)
)");
  auto nc = rt()->call(*method(none, "generate").stages.at(0).function, {std::string("p")}, 1);
  ASSERT_FALSE(nc.is_ok());
  EXPECT_EQ(nc.status().message(), "RuntimeError: model.call(): this servable was loaded without a model runner");

  std::string e = load_error("call_at_load", std::string(kHeader) + R"(
model = register.declare_model("tiny.gguf", "GGUF")
model.call("x")
)");
  EXPECT_NE(e.find("call() runs only inside a stage function"), std::string::npos) << e;
}

TEST(PythonRuntime, ThreadsCallConcurrently) {
  const auto& add = stages().fn("m_add");
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const float a = static_cast<float>(t * 1000 + i);
        auto r = rt()->call(add, {ft({a, 1.f}, {2}), ft({1.f, a}, {2})}, 1);
        if (!r.is_ok()) { ++bad; continue; }
        const auto* tensor = std::get_if<Tensor>(&(*r)[0]);
        if (!tensor || tensor->as<float>()[0] != a + 1 || tensor->as<float>()[1] != a + 1) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// The issue's budget is under 1 ms per request for two trivial stages; one
// call (GIL, thread state, conversions both ways) must be far below that.
TEST(PythonRuntime, CallOverheadIsSmall) {
  const auto& ident = stages().fn("m_ident");
  const Value x = ft({1.f, 2.f, 3.f, 4.f}, {2, 2});
  constexpr int kCalls = 2000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(rt()->call(ident, {x}, 1).is_ok());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kCalls;
  std::printf("python stage call: %.1f us\n", us);
  EXPECT_LT(us, 1000.0);
}

TEST(PythonRuntime, InterruptStopsARunawayStage) {
  using Clock = std::chrono::steady_clock;
  std::atomic<unsigned long> id{0};
  std::atomic<bool> done{false};
  Result<std::vector<Value>> result = Status::internal("not run");
  std::thread worker([&] {
    id = PythonRuntime::current_thread_id();
    result = rt()->call(stages().fn("m_spin"), {int64_t{1}}, 1);
    done = true;
  });
  // Wait until the stage runs its loop (asking Python, which the spinning
  // thread lets others into every few milliseconds).
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto r = rt()->call(stages().fn("m_spinning"), {int64_t{0}}, 1);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    if (std::get<bool>((*r)[0]) || Clock::now() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto interrupted = Clock::now();
  rt()->interrupt(id);
  while (!done && Clock::now() - interrupted < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto took = Clock::now() - interrupted;
  while (!done) {  // a failure must not hang the test binary
    rt()->interrupt(id);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  worker.join();
  EXPECT_LT(took, std::chrono::seconds(1));
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().message(), "TimeoutError");
  // Still working, here and on a thread that is interrupted while it runs no Python.
  EXPECT_TRUE(rt()->call(stages().fn("m_ident"), {int64_t{1}}, 1).is_ok());
  rt()->interrupt(PythonRuntime::current_thread_id());
  EXPECT_TRUE(rt()->call(stages().fn("m_ident"), {int64_t{1}}, 1).is_ok());
}

TEST(PythonRuntime, MindSporeServingImportWorks) {
  ServableConfig c = load_ok("mindspore", R"(
import numpy as np
from mindspore_serving.server import register

model = register.declare_model(model_file="tensor_add.mindir", model_format="MindIR",
                               with_batch_dim=False,
                               context=register.Context(device_id=0))

def add_trans(x1, x2):
    return x1 + x2

@register.register_method(output_names=["y"])
def add_cast(x1, x2):
    y = register.add_stage(add_trans, x1, x2, outputs_count=1)
    return y
)");
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].format, "MINDIR");
  auto r = rt()->call(*method(c, "add_cast").stages.at(0).function,
                      {ft({1.f}, {1}), ft({2.f}, {1})}, 1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(floats((*r)[0]), (std::vector<float>{3.f}));
}

TEST(PythonRuntime, ServablesAreKeptApart) {
  // Both configs import a sibling "helper" module of their own.
  fs::path a = write_config("apart_a", std::string(kHeader) + R"(
import helper
def f(x):
    return helper.VALUE

@register.register_method(output_names=["y"])
def only_a(x):
    return register.add_stage(f, x, outputs_count=1)
)",
                            {{"helper.py", "VALUE = 'from a'\n"}});
  fs::path b = write_config("apart_b", std::string(kHeader) + R"(
import helper
def f(x):
    return helper.VALUE

@register.register_method(output_names=["y"])
def only_b(x):
    return register.add_stage(f, x, outputs_count=1)
)",
                            {{"helper.py", "VALUE = 'from b'\n"}});
  auto ca = load("apart_a", a);
  auto cb = load("apart_b", b);
  ASSERT_TRUE(ca.is_ok()) << ca.status().message();
  ASSERT_TRUE(cb.is_ok()) << cb.status().message();
  ASSERT_EQ(ca->methods.size(), 1u);
  ASSERT_EQ(cb->methods.size(), 1u);
  EXPECT_EQ(ca->methods[0].name, "only_a");
  EXPECT_EQ(cb->methods[0].name, "only_b");
  auto ra = rt()->call(*ca->methods[0].stages[0].function, {int64_t{0}}, 1);
  auto rb = rt()->call(*cb->methods[0].stages[0].function, {int64_t{0}}, 1);
  ASSERT_TRUE(ra.is_ok() && rb.is_ok());
  EXPECT_EQ(std::get<std::string>((*ra)[0]), "from a");
  EXPECT_EQ(std::get<std::string>((*rb)[0]), "from b");

  // Loads from several threads at once each get their own recording.
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      auto r = load(i % 2 ? "apart_a" : "apart_b", i % 2 ? a : b);
      if (!r.is_ok() || r->methods.size() != 1 || r->methods[0].name != (i % 2 ? "only_a" : "only_b")) ++bad;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace cairn::servable
