// bench_servable: what a servable method's machinery adds to a call, without
// the model: a method of two trivial Python stages (the shape of the
// pre- and post-processing around an LLM stage) from predict() to on_done,
// through the repository, the method runner, the task pool and the embedded
// interpreter. The end-to-end comparison with the OpenAI route, LLM included,
// is `cairn bench --servable` (docs/performance.md).
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "servable/repository.h"

namespace {

namespace fs = std::filesystem;
using namespace cairn;

const char* kConfig = R"(
from mindspore_serving.server import register

def pre(x):
    return x

def post(x):
    return x

@register.register_method(output_names=["y"])
def echo(x):
    y = register.add_stage(pre, x, outputs_count=1)
    return register.add_stage(post, y, outputs_count=1)
)";

class Done final : public servable::PredictSink {
 public:
  void on_done(uint64_t, std::vector<servable::InstanceResult> r) override {
    std::lock_guard<std::mutex> lock(mu);
    ok = r.size() == 1 && r[0].is_ok();
    done = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool ok = false;
};

void BM_TwoPythonStages(benchmark::State& state) {
  const fs::path root = fs::temp_directory_path() / ("cairn-bench-servable-" + std::to_string(getpid()));
  fs::create_directories(root / "echo" / "1");
  std::ofstream(root / "echo" / "servable_config.py") << kConfig;
  servable::RepositoryOptions o;
  o.dir = root.string();
  o.poll_seconds = 0;
  auto repo = servable::Repository::open(o);
  if (!repo.is_ok() || !(*repo)->load().is_ok()) {
    state.SkipWithError("the servable did not load");
    fs::remove_all(root);
    return;
  }
  for (auto _ : state) {
    servable::PredictCall call;
    call.servable = "echo";
    call.method = "echo";
    call.instances = {{{"x", std::string("Once upon a time")}}};
    auto sink = std::make_shared<Done>();
    auto id = (*repo)->predict(std::move(call), sink);
    if (!id.is_ok()) {
      state.SkipWithError(id.status().message().c_str());
      break;
    }
    sink->wait();
    if (!sink->ok) {
      state.SkipWithError("the call failed");
      break;
    }
  }
  repo.value().reset();
  fs::remove_all(root);
}
BENCHMARK(BM_TwoPythonStages)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
