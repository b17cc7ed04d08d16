// engine/sampler.cpp — logits to the next token: the sampler chain, its RNG and penalty history.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "kernels/kernels.h"

namespace cairn::engine {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool finite(float v) { return std::isfinite(v); }

Status bad(const std::string& field, const std::string& why) {
  return Status::error("invalid sampling parameter " + field + ": " + why);
}

// Higher logit first; equal logits by lower id, so results never depend on
// the sort's stability.
struct ByLogitDesc {
  std::span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    if (logits[a] != logits[b]) return logits[a] > logits[b];
    return a < b;
  }
};

// max + log(sum(exp(l - max))), the sum in double, with each exp(l - max) in
// exps (kernels::log_sum_exp: vectorised exps); -inf when every logit is -inf.
double log_sum_exp(std::span<const float> logits, std::vector<float>& exps) {
  exps.resize(logits.size());
  return kernels::log_sum_exp(logits.data(), static_cast<int64_t>(logits.size()), exps.data());
}

void top_logprobs(std::span<const float> logits, double lse, int32_t n, SampleResult& out) {
  out.top.clear();
  if (n <= 0) return;
  n = std::min<int32_t>(n, static_cast<int32_t>(logits.size()));
  std::vector<int32_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), ByLogitDesc{logits});
  out.top.reserve(n);
  for (int32_t i = 0; i < n; ++i)
    out.top.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
}

}  // namespace

Status SamplingParams::validate(int32_t vocab_size) const {
  if (!finite(temperature) || temperature < 0)
    return bad("temperature", "must be a finite number >= 0");
  if (top_k < 0) return bad("top_k", "must be >= 0 (0 disables it)");
  if (!finite(top_p) || top_p <= 0 || top_p > 1) return bad("top_p", "must be in (0, 1]");
  if (!finite(min_p) || min_p < 0 || min_p > 1) return bad("min_p", "must be in [0, 1]");
  if (!finite(repetition_penalty) || repetition_penalty <= 0)
    return bad("repetition_penalty", "must be a finite number > 0");
  if (!finite(presence_penalty) || presence_penalty < -2 || presence_penalty > 2)
    return bad("presence_penalty", "must be in [-2, 2]");
  if (!finite(frequency_penalty) || frequency_penalty < -2 || frequency_penalty > 2)
    return bad("frequency_penalty", "must be in [-2, 2]");
  if (penalty_last_n < -1) return bad("penalty_last_n", "must be >= -1 (-1: whole history)");
  for (const auto& [tok, bias] : logit_bias) {
    if (tok < 0 || tok >= vocab_size)
      return bad("logit_bias", "token " + std::to_string(tok) + " is outside the vocabulary of " +
                                   std::to_string(vocab_size));
    if (!finite(bias) || bias < -100 || bias > 100)
      return bad("logit_bias", "bias for token " + std::to_string(tok) + " must be in [-100, 100]");
  }
  if (n_logprobs < 0 || n_logprobs > kMaxLogprobs)
    return bad("n_logprobs", "must be in [0, " + std::to_string(kMaxLogprobs) + "]");
  return Status::ok();
}

void raw_logprobs(std::span<const float> logits, Token token, int32_t n, SampleResult& out) {
  std::vector<float> exps;
  const double lse = log_sum_exp(logits, exps);
  out.token = token;
  out.logprob = (token >= 0 && static_cast<size_t>(token) < logits.size())
                    ? static_cast<float>(logits[token] - lse)
                    : kNegInf;
  top_logprobs(logits, lse, n, out);
}

Result<Sampler> Sampler::create(SamplingParams params, int32_t vocab_size) {
  if (vocab_size <= 0) return Status::error("sampler: vocabulary size must be > 0");
  CAIRN_RETURN_IF_ERROR(params.validate(vocab_size));
  uint64_t seed;
  if (params.seed) {
    seed = *params.seed;
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  return Sampler(std::move(params), vocab_size, seed);
}

Sampler::Sampler(SamplingParams params, int32_t vocab_size, uint64_t seed)
    : params_(std::move(params)), vocab_size_(vocab_size), seed_(seed), rng_(seed) {}

void Sampler::replay(Token t) {
  if (params_.temperature != 0.0f) (void)uniform();  // sample() draws once per non-greedy token
  accept(t);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::accept(Token t) {
  if (params_.penalty_last_n == 0) return;
  history_.push_back(t);
  if (params_.penalty_last_n > 0 && history_.size() > static_cast<size_t>(params_.penalty_last_n))
    history_.pop_front();
}

void Sampler::accept(std::span<const Token> tokens) {
  for (Token t : tokens) accept(t);
}

bool Sampler::apply_bias_and_penalties(std::span<float> logits) const {
  for (const auto& [tok, bias] : params_.logit_bias)
    if (tok >= 0 && static_cast<size_t>(tok) < logits.size()) logits[tok] += bias;

  const bool penalise = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                        params_.frequency_penalty != 0.0f;
  if (!penalise || history_.empty()) return !params_.logit_bias.empty();
  std::unordered_map<Token, int32_t> counts;
  for (Token t : history_)
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) ++counts[t];
  for (const auto& [tok, count] : counts) {
    float& l = logits[tok];
    // CTRL's penalty with llama.cpp's sign fix: dividing a negative logit
    // would make the token more likely, so negative ones are multiplied.
    if (l <= 0)
      l *= params_.repetition_penalty;
    else
      l /= params_.repetition_penalty;
    l -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }
  return true;
}

Result<SampleResult> Sampler::sample(std::span<const float> logits) {
  return sample_impl(logits, -1);
}

Result<SampleResult> Sampler::sample_draft(std::span<const float> logits, Token draft) {
  return sample_impl(logits, draft);
}

Result<SampleResult> Sampler::sample_impl(std::span<const float> logits, Token draft) {
  if (logits.size() != static_cast<size_t>(vocab_size_))
    return Status::error("sampler: got " + std::to_string(logits.size()) +
                         " logits for a vocabulary of " + std::to_string(vocab_size_));
  // Four independent chains: one running max over 32000 logits was a
  // latency-bound chain (~45 us per token).
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const auto is_bad = [](float l) { return std::isnan(l) || l == kInf; };
  const size_t n = logits.size();
  float m0 = kNegInf, m1 = kNegInf, m2 = kNegInf, m3 = kNegInf;
  bool bad = false;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float a = logits[i], b = logits[i + 1], c = logits[i + 2], d = logits[i + 3];
    bad |= is_bad(a) | is_bad(b) | is_bad(c) | is_bad(d);
    m0 = a > m0 ? a : m0;
    m1 = b > m1 ? b : m1;
    m2 = c > m2 ? c : m2;
    m3 = d > m3 ? d : m3;
  }
  for (; i < n; ++i) {
    bad |= is_bad(logits[i]);
    m0 = logits[i] > m0 ? logits[i] : m0;
  }
  if (bad) return Status::error("sampler: the model produced a NaN or +inf logit");
  const float raw_max = std::max(std::max(m0, m1), std::max(m2, m3));
  const double lse = log_sum_exp(logits, exps_);
  if (std::isinf(lse)) return Status::error("sampler: every logit is -inf");

  work_.assign(logits.begin(), logits.end());
  const bool changed = apply_bias_and_penalties(work_);
  const std::span<const float> w(work_);

  Token chosen = -1;
  if (params_.temperature == 0.0f) {
    float best = kNegInf;
    for (int32_t i = 0; i < vocab_size_; ++i)
      if (w[i] > best) best = w[i], chosen = i;
  } else {
    candidates_.clear();
    for (int32_t i = 0; i < vocab_size_; ++i)
      if (w[i] != kNegInf) candidates_.push_back(i);
    const ByLogitDesc order{w};
    bool sorted = false;
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < candidates_.size()) {
      std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(),
                        order);
      candidates_.resize(params_.top_k);
      sorted = true;
    }
    if (params_.top_p < 1.0f && !candidates_.empty()) {
      if (!sorted) std::sort(candidates_.begin(), candidates_.end(), order);
      sorted = true;
      const double mx = w[candidates_[0]];
      double total = 0;
      for (int32_t c : candidates_) total += std::exp(w[c] - mx);
      // Keep the shortest prefix whose mass reaches top_p (at least one token).
      double cum = 0;
      size_t keep = candidates_.size();
      for (size_t i = 0; i < candidates_.size(); ++i) {
        cum += std::exp(w[candidates_[i]] - mx) / total;
        if (cum >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
      candidates_.resize(keep);
    }
    if (params_.min_p > 0.0f && !candidates_.empty()) {
      float mx = kNegInf;
      for (int32_t c : candidates_) mx = std::max(mx, w[c]);
      // p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p); the max always stays.
      const double threshold = mx + std::log(static_cast<double>(params_.min_p));
      std::erase_if(candidates_, [&](int32_t c) { return w[c] < threshold && w[c] != mx; });
    }
    if (candidates_.empty()) return Status::error("sampler: no candidate token left to sample");
    // Every filter keeps the largest logit, so unchanged logits keep the raw max.
    float mx = raw_max;
    if (changed) {
      mx = kNegInf;
      for (int32_t c : candidates_) mx = std::max(mx, w[c]);
    }
    const double inv_t = 1.0 / params_.temperature;
    // Unbiased, unpenalised logits at temperature 1: each weight is the
    // log-softmax pass's own term, so it is reused (a 32000-token
    // vocabulary: one pass of exp instead of three, on the engine thread
    // while the kernel pool waits).
    const bool reuse = !changed && inv_t == 1.0;
    weights_.resize(candidates_.size());
    if (reuse) {
      for (size_t i = 0; i < candidates_.size(); ++i) weights_[i] = exps_[(size_t)candidates_[i]];
    } else {  // exp((w - mx) / T): (w - mx) / T has its max at 0, so the kernel subtracts nothing
      const float inv_tf = static_cast<float>(inv_t);
      for (size_t i = 0; i < candidates_.size(); ++i)
        weights_[i] = (w[candidates_[i]] - mx) * inv_tf;
      kernels::log_sum_exp(weights_.data(), static_cast<int64_t>(weights_.size()), weights_.data());
    }
    double p0 = 0, p1 = 0, p2 = 0, p3 = 0;  // independent chains, as for the max
    const size_t nw = weights_.size();
    size_t k = 0;
    for (; k + 4 <= nw; k += 4) {
      p0 += weights_[k];
      p1 += weights_[k + 1];
      p2 += weights_[k + 2];
      p3 += weights_[k + 3];
    }
    for (; k < nw; ++k) p0 += weights_[k];
    double total = (p0 + p1) + (p2 + p3);
    if (draft >= 0) {
      // Keep the draft with probability p(draft); on rejection it leaves the
      // candidates and the draw below renormalises over the rest.
      size_t at = candidates_.size();
      for (size_t i = 0; i < candidates_.size(); ++i)
        if (candidates_[i] == draft) at = i;
      const double wd = at < candidates_.size() ? (double)weights_[at] : 0.0;
      if (wd > 0 && (uniform() * total < wd || total - wd <= 0)) {
        chosen = draft;
      } else if (at < candidates_.size()) {
        weights_[at] = 0;
        total -= wd;
      }
    }
    const double target = chosen >= 0 ? 0.0 : uniform() * total;
    // The running sum adds in another order than the total: should it end a
    // rounding short of the target, the last token with any weight is drawn
    // (never one whose weight is 0).
    double cum = 0;
    size_t last = 0;
    for (size_t i = 0; i < candidates_.size() && chosen < 0; ++i) {
      cum += weights_[i];
      if (weights_[i] > 0) last = i;
      if (target < cum) {
        chosen = candidates_[i];
        break;
      }
    }
    if (chosen < 0) chosen = candidates_[last];  // (a rejected draft's weight is 0 here)
  }
  if (chosen < 0) return Status::error("sampler: every logit is -inf after bias and penalties");

  SampleResult out;
  out.token = chosen;
  out.logprob = static_cast<float>(logits[chosen] - lse);
  top_logprobs(logits, lse, params_.n_logprobs, out);
  return out;
}

}  // namespace cairn::engine
