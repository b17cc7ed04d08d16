// servable/method_runner.cpp — a method's stages over a call's instances.
#include "servable/method_runner.h"

#include <chrono>
#include <algorithm>
#include <condition_variable>
#include <optional>
#include <string>

#include "servable/llm_stage.h"

namespace cairn::servable {

void CallControl::cancel() {
  std::vector<std::pair<serving::Backend*, serving::RequestId>> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    running = running_;
  }
  for (auto& [backend, id] : running) backend->cancel(id);
}

void CallControl::track(serving::Backend* backend, serving::RequestId id) {
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_.emplace_back(backend, id);
    cancel_now = cancelled_;
  }
  if (cancel_now) backend->cancel(id);
}

void CallControl::untrack(serving::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i].second == id) {
      running_.erase(running_.begin() + static_cast<long>(i));
      return;
    }
}

namespace {

using Clock = std::chrono::steady_clock;
using Outputs = std::vector<Value>;

// One unit of work handed to another thread: its result, and the Python
// thread running it (so a deadline can interrupt it).
struct Job {
  std::mutex mu;
  std::condition_variable cv;
  enum class State { Queued, Running, Done, Abandoned } state = State::Queued;
  unsigned long python_thread = 0;
  serving::RequestId llm_id = 0;
  Result<std::vector<Outputs>> result = Status::internal("the stage did not run");

  void finish(Result<std::vector<Outputs>> r) {
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    state = State::Done;
    cv.notify_all();
  }
};

std::string timeout_message(const MethodSpec& m, const StageSpec& st, double timeout_s) {
  return "stage '" + st.name + "' of method '" + m.name + "' ran past the " +
         std::to_string(static_cast<int64_t>(timeout_s)) + " s stage timeout";
}

// The instance's own problem with its inputs, if any.
Status check_inputs(const MethodSpec& m, const Instance& inst) {
  auto list = [&] {
    std::string s;
    for (const auto& n : m.inputs) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? std::string("none") : s;
  };
  for (const auto& [name, value] : inst) {
    bool known = false;
    for (const auto& n : m.inputs) known = known || n == name;
    if (!known) {
      std::string shown = name.size() > 64 ? name.substr(0, 64) + "..." : name;
      return Status::invalid_argument("unknown input '" + shown + "' for method '" + m.name +
                                      "' (inputs: " + list() + ")");
    }
  }
  for (const auto& n : m.inputs)
    if (!inst.count(n))
      return Status::invalid_argument("input '" + n + "' is missing (method '" + m.name +
                                      "' takes: " + list() + ")");
  return Status::ok();
}

class Run {
 public:
  Run(const std::shared_ptr<Version>& version, const MethodSpec& method, PredictCall call,
      const std::shared_ptr<PredictSink>& sink, CallControl& control, TaskPool& pool,
      const RunOptions& options)
      : version_(version),
        m_(method),
        call_(std::move(call)),
        sink_(sink),
        control_(control),
        pool_(pool),
        opt_(options) {
    const size_t n = call_.instances.size();
    errors_.assign(n, Status::ok());
    outputs_.assign(n, std::vector<Outputs>(m_.stages.size()));
    inputs_.resize(n);
  }

  void run() {
    for (size_t i = 0; i < call_.instances.size(); ++i) {
      Status s = check_inputs(m_, call_.instances[i]);
      if (!s.is_ok()) {
        errors_[i] = s;
        continue;
      }
      for (const auto& name : m_.inputs) inputs_[i].push_back(std::move(call_.instances[i][name]));
    }
    for (size_t s = 0; s < m_.stages.size(); ++s) {
      if (control_.cancelled()) break;
      if (m_.stages[s].kind == StageSpec::Kind::Python)
        run_python(s);
      else
        run_model(s);
    }
    std::vector<InstanceResult> results;
    results.reserve(errors_.size());
    for (size_t i = 0; i < errors_.size(); ++i) {
      if (!errors_[i].is_ok()) {
        results.emplace_back(errors_[i]);
        continue;
      }
      if (control_.cancelled()) {
        results.emplace_back(Status::error(StatusCode::Cancelled, "the call was cancelled"));
        continue;
      }
      Instance out;
      for (size_t o = 0; o < m_.outputs.size(); ++o) out[m_.output_names[o]] = value(i, m_.outputs[o]);
      results.emplace_back(std::move(out));
    }
    sink_->on_done(version_->number(), std::move(results));
  }

 private:
  bool alive(size_t i) const { return errors_[i].is_ok(); }

  const Value& value(size_t i, const ValueRef& ref) const {
    switch (ref.source) {
      case ValueRef::Source::Input: return inputs_[i][ref.index];
      case ValueRef::Source::Stage: return outputs_[i][ref.index][ref.output];
      case ValueRef::Source::Constant: break;
    }
    return ref.constant;
  }

  std::vector<Value> args(size_t i, const StageSpec& st) const {
    std::vector<Value> a;
    a.reserve(st.args.size());
    for (const auto& ref : st.args) a.push_back(value(i, ref));
    return a;
  }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(opt_.stage_timeout_s));
  }

  // Waits for a job until the deadline; a late job is interrupted (Python)
  // or cancelled (LLM) and reported as a timeout.
  Result<std::vector<Outputs>> wait(Job& job, Clock::time_point until, const StageSpec& st,
                                    serving::Backend* llm) {
    std::unique_lock<std::mutex> lock(job.mu);
    bool cancelled = false;
    for (;;) {
      if (job.state == Job::State::Done) return std::move(job.result);
      if (Clock::now() >= until) break;
      if (control_.cancelled()) {
        cancelled = true;
        break;
      }
      // Wakes now and then to notice a cancelled call.
      job.cv.wait_until(lock, std::min(until, Clock::now() + std::chrono::milliseconds(100)));
    }
    const bool running = job.state == Job::State::Running;
    const unsigned long thread = job.python_thread;
    const serving::RequestId id = job.llm_id;
    job.state = Job::State::Abandoned;
    // Under the job's lock: its thread cannot finish it and start another
    // stage meanwhile, so the TimeoutError cannot land in the wrong stage (a
    // call clears a stale one when it starts). The stage's thread takes this
    // lock only after giving up the GIL, so waiting for the GIL here is safe.
    if (!llm && running && thread) {
      if (auto py = PythonRuntime::get(); py.is_ok()) (*py)->interrupt(thread);
    }
    lock.unlock();
    if (llm && id) llm->cancel(id);
    if (cancelled) return Status::error(StatusCode::Cancelled, "the call was cancelled");
    return Status::error(StatusCode::DeadlineExceeded, timeout_message(m_, st, opt_.stage_timeout_s));
  }

  void run_python(size_t s) {
    const StageSpec& st = m_.stages[s];
    std::vector<size_t> live;
    for (size_t i = 0; i < errors_.size(); ++i)
      if (alive(i)) live.push_back(i);
    if (live.empty()) return;
    size_t per_call = 1;
    if (st.batch_size == 0) per_call = static_cast<size_t>(opt_.max_batch);
    if (st.batch_size > 0) per_call = static_cast<size_t>(st.batch_size);
    const bool batched = st.batch_size != StageSpec::kOneInstance;

    struct Group {
      std::vector<size_t> members;
      std::shared_ptr<Job> job;
    };
    std::vector<Group> groups;
    for (size_t k = 0; k < live.size(); k += per_call) {
      Group g;
      for (size_t j = k; j < live.size() && j < k + per_call; ++j) g.members.push_back(live[j]);
      std::vector<std::vector<Value>> a;
      for (size_t i : g.members) a.push_back(args(i, st));
      g.job = std::make_shared<Job>();
      pool_.post([job = g.job, a = std::move(a), fn = st.function, count = st.outputs_count,
                  batched] {
        {
          std::lock_guard<std::mutex> lock(job->mu);
          if (job->state == Job::State::Abandoned) return;
          job->state = Job::State::Running;
          job->python_thread = PythonRuntime::current_thread_id();
        }
        auto py = PythonRuntime::get();
        if (!py.is_ok()) {
          job->finish(py.status());
          return;
        }
        if (batched) {
          job->finish((*py)->call_batched(*fn, a, count));
        } else {
          auto r = (*py)->call(*fn, a.front(), count);
          if (!r.is_ok())
            job->finish(r.status());
          else
            job->finish(std::vector<Outputs>{std::move(r.value())});
        }
      });
      groups.push_back(std::move(g));
    }
    const auto until = deadline();
    for (auto& g : groups) {
      auto r = wait(*g.job, until, st, nullptr);
      if (r.is_ok() && r->size() != g.members.size())
        r = Status::invalid_argument("stage '" + st.name + "' returned " +
                                     std::to_string(r->size()) + " results for " +
                                     std::to_string(g.members.size()) + " instances");
      for (size_t j = 0; j < g.members.size(); ++j) {
        const size_t i = g.members[j];
        if (!r.is_ok())
          errors_[i] = r.status();
        else
          outputs_[i][s] = std::move((*r)[j]);
      }
    }
  }

  // The method outputs this stage's text feeds, for streaming.
  std::vector<std::string> streamed_names(size_t s) const {
    std::vector<std::string> names;
    if (!call_.stream) return names;
    for (size_t o = 0; o < m_.outputs.size(); ++o) {
      const auto& ref = m_.outputs[o];
      if (ref.source == ValueRef::Source::Stage && ref.index == static_cast<int>(s) &&
          ref.output == 0)
        names.push_back(m_.output_names[o]);
    }
    return names;
  }

  // A tensor model's stage: every live instance queued at once on the
  // model's batcher (which merges them with other calls' instances).
  void run_tensor(size_t s, TensorModel& model) {
    const StageSpec& st = m_.stages[s];
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      std::vector<std::optional<Result<Outputs>>> results;
      size_t remaining = 0;
    };
    auto shared = std::make_shared<Shared>();
    auto abandoned = std::make_shared<std::atomic<bool>>(false);
    std::vector<size_t> members;
    std::vector<TensorModel::Job> jobs;
    for (size_t i = 0; i < errors_.size(); ++i) {
      if (!alive(i)) continue;
      TensorModel::Job job;
      job.args = args(i, st);
      job.abandoned = abandoned;
      const size_t k = members.size();
      job.done = [shared, k](Result<Outputs> r) {
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->results[k] = std::move(r);
        --shared->remaining;
        shared->cv.notify_all();
      };
      members.push_back(i);
      jobs.push_back(std::move(job));
    }
    if (members.empty()) return;
    shared->results.resize(members.size());
    shared->remaining = members.size();
    model.submit(std::move(jobs));
    const auto until = deadline();
    std::unique_lock<std::mutex> lock(shared->mu);
    Status late = Status::ok();
    while (shared->remaining > 0) {
      if (control_.cancelled()) {
        late = Status::error(StatusCode::Cancelled, "the call was cancelled");
        break;
      }
      if (Clock::now() >= until) {
        late = Status::error(StatusCode::DeadlineExceeded, timeout_message(m_, st, opt_.stage_timeout_s));
        break;
      }
      shared->cv.wait_until(lock, std::min(until, Clock::now() + std::chrono::milliseconds(100)));
    }
    *abandoned = true;
    for (size_t k = 0; k < members.size(); ++k) {
      auto& r = shared->results[k];
      if (!r)
        errors_[members[k]] = late;
      else if (!r->is_ok())
        errors_[members[k]] = r->status();
      else
        outputs_[members[k]][s] = std::move(r->value());
    }
  }

  void run_model(size_t s) {
    const StageSpec& st = m_.stages[s];
    if (TensorModel* tm = version_->tensor_model(st.model)) {
      run_tensor(s, *tm);
      return;
    }
    serving::Backend& backend = *version_->llm(st.model);
    const auto& defaults = version_->config().models[st.model].options;
    const auto names = streamed_names(s);
    std::vector<std::pair<size_t, std::shared_ptr<Job>>> jobs;
    for (size_t i = 0; i < errors_.size(); ++i) {
      if (!alive(i)) continue;
      std::map<std::string, Value> kwargs;
      for (const auto& [name, ref] : st.kwargs) kwargs[name] = value(i, ref);
      const bool embed = is_embed_task(kwargs);
      std::optional<serving::EmbedRequest> embed_req;
      Result<serving::GenerateRequest> req = serving::GenerateRequest{};
      if (embed && st.outputs_count != 1) {
        errors_[i] = Status::invalid_argument("stage '" + st.name +
                                              "': an embedding stage has one output (outputs_count=1)");
        continue;
      }
      if (embed) {
        auto e = llm_embed_request(st.name, args(i, st), kwargs);
        if (!e.is_ok()) {
          errors_[i] = e.status();
          continue;
        }
        embed_req = std::move(*e);
      } else {
        req = llm_request(st.name, args(i, st), defaults, kwargs);
        if (!req.is_ok()) {
          errors_[i] = req.status();
          continue;
        }
      }
      auto job = std::make_shared<Job>();
      job->state = Job::State::Running;
      LlmCallbacks cb;
      if (!names.empty()) {
        std::shared_ptr<PredictSink> sink = sink_;
        cb.on_text = [sink, names, i](const std::string& text) {
          for (const auto& n : names) sink->on_text(i, n, text);
        };
      }
      cb.on_done = [job](Result<Outputs> r) {
        if (!r.is_ok())
          job->finish(r.status());
        else
          job->finish(std::vector<Outputs>{std::move(r.value())});
      };
      const auto id = embed_req
                          ? run_llm_embed(backend, std::move(*embed_req), std::move(cb))
                          : run_llm(backend, std::move(req.value()), st.outputs_count, std::move(cb));
      if (id != 0) {
        {
          std::lock_guard<std::mutex> lock(job->mu);
          job->llm_id = id;
        }
        control_.track(&backend, id);
      }
      jobs.emplace_back(i, std::move(job));
    }
    const auto until = deadline();
    for (auto& [i, job] : jobs) {
      const serving::RequestId id = job->llm_id;
      auto r = wait(*job, until, st, &backend);
      if (id) control_.untrack(id);
      if (!r.is_ok())
        errors_[i] = r.status();
      else
        outputs_[i][s] = std::move(r->front());
    }
  }

  std::shared_ptr<Version> version_;
  const MethodSpec& m_;
  PredictCall call_;
  std::shared_ptr<PredictSink> sink_;
  CallControl& control_;
  TaskPool& pool_;
  RunOptions opt_;
  std::vector<Status> errors_;
  std::vector<std::vector<Outputs>> outputs_;  // [instance][stage] -> outputs
  std::vector<std::vector<Value>> inputs_;      // [instance][input]
};

}  // namespace

void run_method(const std::shared_ptr<Version>& version, const MethodSpec& method,
                PredictCall call, const std::shared_ptr<PredictSink>& sink, CallControl& control,
                TaskPool& pool, const RunOptions& options) {
  Run(version, method, std::move(call), sink, control, pool, options).run();
}

}  // namespace cairn::servable
