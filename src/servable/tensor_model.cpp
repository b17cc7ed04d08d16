// servable/tensor_model.cpp — instances checked, merged into batches, run, split back.
#include "servable/tensor_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace cairn::servable {

using values::DType;
using values::Tensor;
using values::Value;
using Clock = std::chrono::steady_clock;

namespace {

// Bounds on the batching options: past them a setting is a typo, not a wish.
constexpr int64_t kMaxBatchSize = 4096;
constexpr int64_t kMaxQueueDelayUs = 10'000'000;

Result<int64_t> int_option(const std::string& where, const std::string& key, const Value& v,
                           int64_t lo, int64_t hi) {
  const auto* i = std::get_if<int64_t>(&v);
  if (!i || *i < lo || *i > hi)
    return Status::invalid_argument(where + ": option '" + key + "' must be an int in [" +
                                    std::to_string(lo) + ", " + std::to_string(hi) + "], not " +
                                    values::describe(v));
  return *i;
}

std::string dims_string(const std::vector<int64_t>& dims, size_t from) {
  std::string s = "[";
  for (size_t i = from; i < dims.size(); ++i) {
    if (i > from) s += ", ";
    s += dims[i] < 0 ? std::string("*") : std::to_string(dims[i]);
  }
  return s + "]";
}

// A number given where a 0-d tensor is expected (REST clients send plain
// numbers), as a tensor of the input's dtype.
Result<Tensor> scalar_tensor(const Value& v, DType dtype) {
  double d = 0;
  if (const auto* b = std::get_if<bool>(&v)) d = *b;
  else if (const auto* i = std::get_if<int64_t>(&v)) d = static_cast<double>(*i);
  else if (const auto* f = std::get_if<double>(&v)) d = *f;
  else return Status::invalid_argument("not a number");
  std::string data(values::dtype_size(dtype), '\0');
  switch (dtype) {
    case DType::Float32: { const float x = static_cast<float>(d); std::memcpy(data.data(), &x, 4); break; }
    case DType::Float64: std::memcpy(data.data(), &d, 8); break;
    case DType::Int64: {
      if (!std::holds_alternative<int64_t>(v) && !std::holds_alternative<bool>(v))
        return Status::invalid_argument("not an int");
      const int64_t x = std::holds_alternative<bool>(v) ? int64_t(std::get<bool>(v)) : std::get<int64_t>(v);
      std::memcpy(data.data(), &x, 8);
      break;
    }
    case DType::Int32: {
      const auto* i = std::get_if<int64_t>(&v);
      if (!i || *i < INT32_MIN || *i > INT32_MAX) return Status::invalid_argument("not an int32");
      const int32_t x = static_cast<int32_t>(*i);
      std::memcpy(data.data(), &x, 4);
      break;
    }
    case DType::Bool: {
      const auto* b = std::get_if<bool>(&v);
      if (!b) return Status::invalid_argument("not a bool");
      data[0] = *b ? 1 : 0;
      break;
    }
    default: return Status::invalid_argument("no scalar form");
  }
  return Tensor::make(dtype, {}, std::move(data));
}

}  // namespace

Result<BatchSettings> batch_settings(const ModelDecl& decl) {
  BatchSettings s;
  const std::string where = "declare_model('" + decl.file + "')";
  for (const auto& [key, v] : decl.options) {
    if (key == "max_batch_size") {
      CAIRN_ASSIGN_OR_RETURN(const int64_t n, int_option(where, key, v, 1, kMaxBatchSize));
      s.max_batch_size = static_cast<int>(n);
    } else if (key == "max_queue_delay_microseconds") {
      CAIRN_ASSIGN_OR_RETURN(s.max_queue_delay_us, int_option(where, key, v, 0, kMaxQueueDelayUs));
    } else if (key == "batching") {
      const auto* b = std::get_if<bool>(&v);
      if (!b) return Status::invalid_argument(where + ": option 'batching' must be True or False");
      s.batching = *b;
    } else {
      return Status::invalid_argument(where + ": option '" + key +
                                      "' is not a tensor model's (options: max_batch_size, "
                                      "max_queue_delay_microseconds, batching)");
    }
  }
  return s;
}

Result<std::unique_ptr<TensorModel>> TensorModel::load(const ModelDecl& decl,
                                                       std::shared_ptr<ThreadPool> pool) {
  onnx::SessionOptions so;
  so.pool = pool.get();
  auto session = onnx::Session::load(decl.path, so);
  if (!session.is_ok()) return Status::invalid_argument("model '" + decl.file + "': " + session.status().message());
  return from_session(decl, std::move(session.value()), std::move(pool));
}

Result<std::unique_ptr<TensorModel>> TensorModel::from_session(const ModelDecl& decl,
                                                               std::unique_ptr<onnx::Session> session,
                                                               std::shared_ptr<ThreadPool> pool) {
  const std::string where = "model '" + decl.file + "'";
  CAIRN_ASSIGN_OR_RETURN(const BatchSettings settings, batch_settings(decl));
  std::unique_ptr<TensorModel> m(new TensorModel());
  m->file_ = decl.file;
  m->session_ = std::move(session);
  m->pool_ = std::move(pool);
  const auto& inputs = m->session_->inputs();
  m->shared_input_.assign(inputs.size(), false);
  for (int i : decl.without_batch_dim_inputs) {
    if (i < 0 || static_cast<size_t>(i) >= inputs.size())
      return Status::invalid_argument(where + ": without_batch_dim_inputs names input " +
                                      std::to_string(i) + ", but the model has " +
                                      std::to_string(inputs.size()) + " inputs");
    m->shared_input_[static_cast<size_t>(i)] = true;
  }
  bool any_batched = false;
  if (decl.with_batch_dim) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (m->shared_input_[i]) continue;
      const auto& in = inputs[i];
      if (!in.has_shape || in.dims.empty())
        return Status::invalid_argument(
            where + ": with_batch_dim=True, but input '" + in.name +
            "' has no first dimension to batch on (list it in without_batch_dim_inputs, or "
            "declare the model with with_batch_dim=False)");
      any_batched = true;
      if (in.dims[0] > 0) {
        if (m->fixed_batch_ && m->fixed_batch_ != in.dims[0])
          return Status::invalid_argument(where + ": inputs disagree on the batch size (" +
                                          std::to_string(m->fixed_batch_) + " and " +
                                          std::to_string(in.dims[0]) + ")");
        m->fixed_batch_ = in.dims[0];
      }
    }
    for (const auto& out : m->session_->outputs())
      if (out.has_shape && out.dims.empty())
        return Status::invalid_argument(where + ": with_batch_dim=True, but output '" + out.name +
                                        "' is a scalar, with no batch dimension to split");
  }
  m->with_batch_dim_ = decl.with_batch_dim && any_batched;
  if (!m->with_batch_dim_)
    m->batch_limit_ = 1;
  else if (!settings.batching)
    m->batch_limit_ = 1;
  else
    m->batch_limit_ = m->fixed_batch_ ? m->fixed_batch_ : settings.max_batch_size;
  m->delay_us_ = settings.max_queue_delay_us;
  m->thread_ = std::thread([p = m.get()] { p->loop(); });
  return m;
}

TensorModel::~TensorModel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& item : queue_)
    if (!(item.abandoned && *item.abandoned))
      item.done(Status::unavailable("model '" + file_ + "' was unloaded"));
}

TensorModelStats TensorModel::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Result<std::string> TensorModel::check(const std::vector<Value>& args,
                                       std::vector<Tensor>& tensors) const {
  const auto& inputs = session_->inputs();
  if (args.size() != inputs.size()) {
    std::string names;
    for (const auto& in : inputs) names += (names.empty() ? "" : ", ") + in.name;
    return Status::invalid_argument("model '" + file_ + "' takes " + std::to_string(inputs.size()) +
                                    " inputs (" + names + "); the stage gave " +
                                    std::to_string(args.size()));
  }
  std::string key;
  tensors.clear();
  tensors.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& in = inputs[i];
    const bool batched = with_batch_dim_ && !shared_input_[i];
    const size_t from = batched ? 1 : 0;
    const std::string expected = std::string(values::dtype_name(in.dtype)) +
                                 (in.has_shape ? " " + dims_string(in.dims, from) : "") +
                                 (batched ? " per instance" : "");
    auto refuse = [&](const std::string& got) {
      return Status::invalid_argument("input '" + in.name + "' of model '" + file_ + "': expected " +
                                      expected + ", got " + got);
    };
    if (const auto* t = std::get_if<Tensor>(&args[i])) {
      tensors.push_back(*t);
    } else {
      const bool scalar_expected = in.has_shape && in.dims.size() == from;
      auto s = scalar_expected ? scalar_tensor(args[i], in.dtype) : Status::invalid_argument("");
      if (!s.is_ok()) return refuse(values::describe(args[i]));
      tensors.push_back(std::move(s.value()));
    }
    const Tensor& t = tensors.back();
    if (t.dtype != in.dtype) return refuse(values::describe(args[i]));
    if (in.has_shape) {
      bool ok = t.shape.size() + from == in.dims.size();
      for (size_t d = 0; ok && d < t.shape.size(); ++d)
        ok = in.dims[d + from] < 0 || in.dims[d + from] == t.shape[d];
      if (!ok) return refuse(values::describe(t));
    }
    if (batched) {
      key += 'b';
      for (int64_t d : t.shape) key += std::to_string(d) + ",";
    } else {
      // Shared inputs must agree byte for byte to share a forward.
      key += 's' + std::to_string(t.data.size()) + ':';
      for (int64_t d : t.shape) key += std::to_string(d) + ",";
      key += t.data;
    }
    key += ';';
  }
  return key;
}

void TensorModel::submit(std::vector<Job> jobs) {
  const auto now = Clock::now();
  std::vector<std::pair<Done, Status>> refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& job : jobs) {
      Item item;
      auto key = check(job.args, item.tensors);
      if (!key.is_ok()) {
        refused.emplace_back(std::move(job.done), key.status());
        continue;
      }
      if (stopping_) {
        refused.emplace_back(std::move(job.done), Status::unavailable("model '" + file_ + "' was unloaded"));
        continue;
      }
      item.done = std::move(job.done);
      item.abandoned = std::move(job.abandoned);
      item.key = std::move(key.value());
      item.queued = now;
      queue_.push_back(std::move(item));
    }
  }
  cv_.notify_all();
  for (auto& [done, status] : refused) done(std::move(status));
}

void TensorModel::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    while (!queue_.empty() && queue_.front().abandoned && *queue_.front().abandoned)
      queue_.pop_front();
    if (queue_.empty()) continue;
    const std::string key = queue_.front().key;
    auto matching = [&] {
      int64_t n = 0;
      for (const auto& it : queue_)
        if (it.key == key && !(it.abandoned && *it.abandoned)) ++n;
      return n;
    };
    // Wait for a fuller batch, up to the delay after the oldest instance
    // came in; new instances wake this up.
    if (batch_limit_ > 1 && delay_us_ > 0) {
      const auto until = queue_.front().queued + std::chrono::microseconds(delay_us_);
      while (!stopping_ && matching() < batch_limit_ && Clock::now() < until)
        cv_.wait_until(lock, until);
      if (stopping_) return;
    }
    std::vector<Item> batch;
    for (auto it = queue_.begin(); it != queue_.end() && int64_t(batch.size()) < batch_limit_;) {
      if (it->abandoned && *it->abandoned) {
        it = queue_.erase(it);
      } else if (it->key == key) {
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (batch.empty()) continue;
    lock.unlock();
    run_batch(batch);
    lock.lock();
  }
}

void TensorModel::run_batch(std::vector<Item>& batch) {
  std::vector<Item*> items;
  for (auto& it : batch) items.push_back(&it);
  auto r = forward(items);
  if (r.is_ok()) {
    for (size_t k = 0; k < batch.size(); ++k) batch[k].done(std::move((*r)[k]));
    return;
  }
  if (batch.size() == 1) {
    batch[0].done(r.status());
    return;
  }
  // One bad instance must not fail the others: run each alone to find it.
  for (auto& it : batch) {
    auto one = forward({&it});
    if (one.is_ok())
      it.done(std::move(one->front()));
    else
      it.done(one.status());
  }
}

Result<std::vector<std::vector<Value>>> TensorModel::forward(const std::vector<Item*>& items) {
  const auto& inputs = session_->inputs();
  const auto& outputs = session_->outputs();
  if (!with_batch_dim_) {
    std::vector<const Tensor*> args;
    for (const auto& t : items.front()->tensors) args.push_back(&t);
    CAIRN_ASSIGN_OR_RETURN(auto outs, session_->run(args));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.runs;
      ++stats_.instances;
      stats_.largest_batch = std::max<uint64_t>(stats_.largest_batch, 1);
    }
    std::vector<Value> values;
    for (auto& o : outs) values.emplace_back(std::move(o));
    return std::vector<std::vector<Value>>{std::move(values)};
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t rows = fixed_batch_ ? fixed_batch_ : n;
  // Merged inputs: instance rows one after another, zero rows as padding.
  std::vector<Tensor> merged(inputs.size());
  std::vector<const Tensor*> args(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& first = items.front()->tensors[i];
    if (shared_input_[i]) {
      args[i] = &first;
      continue;
    }
    Tensor& m = merged[i];
    m.dtype = first.dtype;
    m.shape.push_back(rows);
    m.shape.insert(m.shape.end(), first.shape.begin(), first.shape.end());
    const size_t row_bytes = first.data.size();
    CAIRN_ASSIGN_OR_RETURN(const int64_t count, Tensor::count_of(m.dtype, m.shape));
    (void)count;
    m.data.reserve(row_bytes * static_cast<size_t>(rows));
    for (const Item* it : items) m.data += it->tensors[i].data;
    m.data.resize(row_bytes * static_cast<size_t>(rows), '\0');
    args[i] = &m;
  }
  CAIRN_ASSIGN_OR_RETURN(auto outs, session_->run(args));
  std::vector<std::vector<Value>> per(items.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const Tensor& t = outs[o];
    if (t.shape.empty() || t.shape[0] != rows)
      return Status::invalid_argument("model '" + file_ + "': output '" + outputs[o].name +
                                      "' has shape " + values::describe(t) +
                                      ", whose first dimension is not the batch of " +
                                      std::to_string(rows) + " (declare the model with "
                                      "with_batch_dim=False if it has no batch dimension)");
    const size_t row_bytes = t.data.size() / static_cast<size_t>(rows);
    const std::vector<int64_t> shape(t.shape.begin() + 1, t.shape.end());
    for (size_t k = 0; k < items.size(); ++k) {
      Tensor part;
      part.dtype = t.dtype;
      part.shape = shape;
      part.data = t.data.substr(k * row_bytes, row_bytes);
      per[k].emplace_back(std::move(part));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.runs;
    stats_.instances += static_cast<uint64_t>(n);
    stats_.padded += static_cast<uint64_t>(rows - n);
    stats_.largest_batch = std::max<uint64_t>(stats_.largest_batch, static_cast<uint64_t>(n));
  }
  return per;
}

}  // namespace cairn::servable
