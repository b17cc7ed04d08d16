// `cairn bench-model` end to end on a tiny model the test makes itself, and the
// bandwidth and int8 peak probes it relies on.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_process.h"
#include "core/cpu_features.h"
#include "kernels/bandwidth_probe.h"
#include "kernels/compute_probe.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using cairn::test::cairn_binary;
using cairn::test::expect_one_error_line;
using cairn::test::Proc;
using cairn::test::run_cairn;

// The first number on the stdout line that starts with `label`, or -1.
double number_after(const std::string& out, const std::string& label, int index = 0) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label, 0) != 0) continue;
    std::istringstream rest(line.substr(label.size()));
    double v = -1;
    for (int i = 0; i <= index; ++i)
      if (!(rest >> v)) return -1;
    return v;
  }
  return -1;
}

// Every number on the first line that starts with `label`, after the label.
std::vector<double> numbers_on(const std::string& out, const std::string& label) {
  std::istringstream in(out);
  std::vector<double> v;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label, 0) != 0) continue;
    const std::string rest = line.substr(label.size());
    const std::regex number(R"([0-9]+(\.[0-9]+)?)");
    for (auto it = std::sregex_iterator(rest.begin(), rest.end(), number);
         it != std::sregex_iterator(); ++it)
      v.push_back(std::stod(it->str()));
    break;
  }
  return v;
}

// How far `printed`, a quotient 100 * num / den printed to `q_step`, may be
// from the quotient of num and den as printed to `num_step` and `den_step`:
// each rounding moves a printed number by up to half its step, and a slow or
// busy host prints small rates whose rounding is a large share of them.
double quotient_slack(double printed, double num, double num_step, double den, double den_step,
                      double q_step) {
  return printed * (num_step / 2 / num + den_step / 2 / den) * 1.05 + q_step / 2 + 0.01;
}

class BenchModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(cairn::test::temp_dir("bench-model"));
    model_ = new std::string((*dir_ / "tiny.gguf").string());
    Proc made = run_cairn({"make-model", *model_, "--dim", "64", "--layers", "2", "--heads", "4",
                           "--kv-heads", "2", "--ffn", "128", "--ctx", "256", "--type", "q8_0"});
    made_ok_ = made.exit_code == 0;
    made_err_ = new std::string(made.err);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete model_;
    delete made_err_;
  }
  void SetUp() override { ASSERT_TRUE(made_ok_) << "make-model failed: " << *made_err_; }

  // A small probe so the test stays quick; the default is 1 GiB.
  std::vector<std::string> args(std::vector<std::string> extra) const {
    std::vector<std::string> v{"bench-model",    "-m", *model_, "--probe-mib", "16",
                               "--probe-passes", "2"};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  }

  static fs::path* dir_;
  static std::string* model_;
  static std::string* made_err_;
  static bool made_ok_;
};
fs::path* BenchModel::dir_ = nullptr;
std::string* BenchModel::model_ = nullptr;
std::string* BenchModel::made_err_ = nullptr;
bool BenchModel::made_ok_ = false;

TEST_F(BenchModel, PrintsEveryRowWithPositiveNumbers) {
  Proc r = run_cairn(args({"-p", "40", "-n", "6", "--batch", "1,3", "--reps", "2", "--threads", "2",
                           "--ubatch", "16", "--decode-ctx", "5", "--paired-segment", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& out = r.out;
  for (const char* row : {"prefill p=40", "decode B=1 n=6", "decode B=3 n=6"}) {
    SCOPED_TRACE(row);
    EXPECT_GT(number_after(out, row, 0), 0);  // tokens
    EXPECT_GT(number_after(out, row, 1), 0);  // best seconds
    EXPECT_GT(number_after(out, row, 2), 0);  // best tok/s
    EXPECT_GT(number_after(out, row, 3), 0);  // mean tok/s
    EXPECT_GE(number_after(out, row, 4), 0);  // cpu % (a tiny run may round to 0)
  }
  EXPECT_EQ(number_after(out, "prefill p=40", 0), 40);
  EXPECT_EQ(number_after(out, "decode B=3 n=6", 0), 18);
  EXPECT_EQ(out.find("decode B=1 n=6", out.find("decode B=1 n=6") + 1), std::string::npos)
      << "batch 1 measured once";
  for (const char* row :
       {"weight bytes / token", "kv bytes / token (B=1)", "bytes / decoded token (B=1)",
        "read bandwidth, weights", "read bandwidth, machine", "decode efficiency"}) {
    EXPECT_GT(number_after(out, row), 0) << row << "\n" << out;
  }
  // The efficiency's probe reads the model's own weights: the bytes a token
  // reads from them, less at most 14 unaligned bytes per matrix.
  const size_t over = out.find("over the model's ");
  ASSERT_NE(over, std::string::npos) << out;
  const double probed_mb = std::stod(out.substr(over + 17));
  const double weight_mb = number_after(out, "weight bytes / token");
  EXPECT_LE(probed_mb, weight_mb + 0.05) << out;
  EXPECT_GE(probed_mb, weight_mb * 0.99 - 0.05) << out;
  // Each batch-1 run comes with the probe taken just before it; the reported
  // efficiency is the fastest run's against its own probe.
  const double mb_per_token = number_after(out, "bytes / decoded token (B=1)");
  double best_tps = 0, best_eff = -1;
  for (const char* run : {"  run 1:", "  run 2:"}) {
    SCOPED_TRACE(run);
    const std::vector<double> v = numbers_on(out, run);  // tok/s, probe, reads, efficiency
    ASSERT_EQ(v.size(), 4u) << out;
    EXPECT_GT(v[0], 0);
    EXPECT_GT(v[1], 0);
    EXPECT_NEAR(v[2], v[0] * mb_per_token / 1e3, 0.006 + v[2] * 1e-3);
    EXPECT_NEAR(v[3], 100 * v[2] / v[1], quotient_slack(v[3], v[2], 0.01, v[1], 0.01, 0.1));
    if (v[0] > best_tps) best_tps = v[0], best_eff = v[3];
  }
  EXPECT_TRUE(numbers_on(out, "  run 3:").empty()) << "one line per run";
  // Each prefill run comes with an int8 peak probe taken just before it (or a
  // line saying why there is none), and its matmuls' rate against that peak.
  const double mmac_per_token = number_after(out, "matmul work / token");
  EXPECT_GT(mmac_per_token, 0) << out;
  const bool vnni = cairn::isa_enabled(cairn::Isa::Avx512Vnni);
  EXPECT_EQ(out.find("  no probe: ") == std::string::npos, vnni) << out;
  for (const char* run : {"  prefill run 1:", "  prefill run 2:"}) {
    SCOPED_TRACE(run);
    const std::vector<double> v = numbers_on(out, run);  // tok/s, peak, matmuls, % of peak
    ASSERT_EQ(v.size(), 4u) << out;
    EXPECT_GT(v[0], 0);
    EXPECT_NEAR(v[2], v[0] * mmac_per_token / 1e3, 0.06 + v[2] * 2e-3);
    if (vnni) {
      EXPECT_GT(v[1], 0);
      EXPECT_NEAR(v[3], 100 * v[2] / v[1], quotient_slack(v[3], v[2], 0.1, v[1], 0.1, 0.1));
    } else {
      EXPECT_EQ(v[1], 0);
    }
  }
  EXPECT_TRUE(numbers_on(out, "  prefill run 3:").empty()) << "one line per run";
  EXPECT_NEAR(number_after(out, "decode efficiency"), best_eff, 0.051) << out;
  // Paired: each run of 6 tokens in segments of 4 and 2, a probe pass between
  // segments; a segment's efficiency is its reads over the mean of its two
  // passes, and the summary is their median.
  std::vector<double> effs;
  for (int i = 1; i <= 4; ++i) {
    const std::string seg = "  segment  " + std::to_string(i) + ":";
    SCOPED_TRACE(seg);
    const std::vector<double> v = numbers_on(out, seg);  // tok/s, before, after, reads, eff
    ASSERT_EQ(v.size(), 5u) << out;
    for (double x : v) EXPECT_GT(x, 0);
    // Reads within 1% of tok/s x the run's mean bytes per token (a segment's
    // own K/V context differs a little from the run's mean).
    EXPECT_NEAR(v[3], v[0] * mb_per_token / 1e3, 0.01 * v[3] + 0.006);
    EXPECT_NEAR(v[4], 100 * v[3] / ((v[1] + v[2]) / 2),
                quotient_slack(v[4], v[3], 0.01, (v[1] + v[2]) / 2, 0.01, 0.1));
    effs.push_back(v[4]);
  }
  EXPECT_TRUE(numbers_on(out, "  segment  5:").empty()) << "2 runs x 2 segments";
  // Consecutive segments of a run share the pass between them.
  EXPECT_EQ(numbers_on(out, "  segment  1:")[2], numbers_on(out, "  segment  2:")[1]);
  std::sort(effs.begin(), effs.end());
  const std::vector<double> paired = numbers_on(out, "decode efficiency, paired");
  ASSERT_EQ(paired.size(), 4u) << out;  // median, count, min, max
  EXPECT_NEAR(paired[0], (effs[1] + effs[2]) / 2, 0.051);
  EXPECT_EQ(paired[1], 4);
  EXPECT_NEAR(paired[2], effs.front(), 0.051);
  EXPECT_NEAR(paired[3], effs.back(), 0.051);
  // The parts add up to the total (printed in MB with four decimals).
  EXPECT_NEAR(
      number_after(out, "weight bytes / token") + number_after(out, "kv bytes / token (B=1)"),
      number_after(out, "bytes / decoded token (B=1)"), 0.00011);
  EXPECT_NE(out.find(std::string("isa          ") + cairn::isa_name(cairn::active_isa())),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("threads      2"), std::string::npos) << out;
  EXPECT_NE(out.find("cpu          "), std::string::npos) << out;
  // The table carries the command that reproduces it, defaults spelled out.
  EXPECT_NE(out.find("command      cairn bench-model -m " + *model_ +
                     " -p 40 -n 6 --batch 1,3 --threads 2 --reps 2 --ubatch 16 --decode-ctx 5"
                     " --paired-segment 4"),
            std::string::npos)
      << out;
}

TEST_F(BenchModel, DefaultBatchesRunAndKvFitsTheRun) {
  Proc r = run_cairn(args({"-p", "8", "-n", "4", "--reps", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* row : {"decode B=1 n=4", "decode B=4 n=4", "decode B=16 n=4"})
    EXPECT_GT(number_after(r.out, row, 2), 0) << row << "\n" << r.out;
}

TEST_F(BenchModel, BadOptionsAreOneErrorLine) {
  expect_one_error_line(run_cairn(args({"-p", "abc"})), "-p");
  expect_one_error_line(run_cairn(args({"-p", "0"})), "-p");
  expect_one_error_line(run_cairn(args({"-n", "-3"})), "-n");
  expect_one_error_line(run_cairn(args({"--reps", "0"})), "--reps");
  expect_one_error_line(run_cairn(args({"--threads", "0"})), "--threads");
  expect_one_error_line(run_cairn(args({"--threads", "x2"})), "--threads");
  expect_one_error_line(run_cairn(args({"--ubatch", "-1"})), "--ubatch");
  expect_one_error_line(run_cairn(args({"--paired-segment", "0"})), "--paired-segment");
  expect_one_error_line(run_cairn(args({"--batch", ""})), "--batch");
  expect_one_error_line(run_cairn(args({"--batch", "1,,4"})), "--batch");
  expect_one_error_line(run_cairn(args({"--batch", "1,x"})), "'x'");
  expect_one_error_line(run_cairn(args({"--batch", "0"})), "--batch");
  expect_one_error_line(run_cairn(args({"--batch", "-4"})), "--batch");
  expect_one_error_line(run_cairn(args({"--batch", "4,"})), "--batch");
  expect_one_error_line(run_cairn(args({"-p", "200", "-n", "100"})), "context of 256");
  expect_one_error_line(run_cairn(args({"--decode-ctx", "250", "-n", "10", "-p", "8"})),
                        "context of 256");
  expect_one_error_line(run_cairn({"bench-model", "-m", "/no/such/model.gguf"}),
                        "/no/such/model.gguf");
  expect_one_error_line(run_cairn({"bench-model", "-p", "8"}), "--model");
}

// The probe sums the same words whatever load width it uses, including
// lengths that leave a tail after the unrolled loop.
TEST(BandwidthProbe, EveryLoadWidthGivesTheScalarSum) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> words(1000);
  for (auto& w : words) w = rng();
  for (size_t n : {0u, 1u, 7u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 999u, 1000u}) {
    uint64_t want = 0;
    for (size_t i = 0; i < n; ++i) want += words[i];
    for (cairn::Isa isa :
         {cairn::Isa::Scalar, cairn::Isa::Avx2, cairn::Isa::Avx512, cairn::Isa::Avx512Vnni}) {
      // Unaligned start too: the loads must not assume alignment.
      EXPECT_EQ(cairn::kernels::sum_words(words.data(), n, isa), want) << n;
      if (n > 0) {
        uint64_t tail = want - words[0];
        EXPECT_EQ(cairn::kernels::sum_words(words.data() + 1, n - 1, isa), tail) << n;
      }
    }
  }
}

TEST(BandwidthProbe, MeasuresAndChecksItsArguments) {
  cairn::kernels::BandwidthOptions o;
  o.bytes = size_t{8} << 20;
  o.threads = 2;
  o.passes = 2;
  auto r = cairn::kernels::measure_read_bandwidth(o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->best_gbps, 0);
  EXPECT_GE(r->best_gbps, r->mean_gbps);
  EXPECT_GT(r->best_cpu_share, 0);
  EXPECT_EQ(r->bytes, o.bytes);
  // The buffer holds 0, 1, 2, ... as words: the sum checks every word was read once.
  const uint64_t n = o.bytes / 8;
  EXPECT_EQ(r->checksum, n * (n - 1) / 2);

  o.threads = 0;
  EXPECT_FALSE(cairn::kernels::measure_read_bandwidth(o).is_ok());
  o.threads = 1;
  o.passes = 0;
  EXPECT_FALSE(cairn::kernels::measure_read_bandwidth(o).is_ok());
  o.passes = 1;
  o.bytes = 100;
  auto small = cairn::kernels::measure_read_bandwidth(o);
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("page"), std::string::npos);
}

TEST(BandwidthProbe, KeptProbeReadsEveryWordOnEachPass) {
  cairn::kernels::BandwidthOptions o;
  o.bytes = size_t{8} << 20;
  o.threads = 2;
  auto probe = cairn::kernels::ReadProbe::create(o);
  ASSERT_TRUE(probe.is_ok()) << probe.status().message();
  cairn::kernels::ReadProbe& p = **probe;
  EXPECT_EQ(p.bytes(), o.bytes);
  EXPECT_EQ(p.threads(), 2);
  const uint64_t n = o.bytes / 8;
  for (int i = 0; i < 3; ++i) {
    const cairn::kernels::ReadProbe::Pass pass = p.pass();
    EXPECT_GT(pass.gbps, 0);
    EXPECT_GT(pass.cpu_share, 0);
    EXPECT_EQ(p.checksum(), n * (n - 1) / 2) << "pass " << i;
  }
  o.threads = 0;
  EXPECT_FALSE(cairn::kernels::ReadProbe::create(o).is_ok());
  o.threads = 3;
  o.bytes = 3 * 4096 - 1;
  auto small = cairn::kernels::ReadProbe::create(o);
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("page"), std::string::npos);
}

// Over borrowed memory: every whole word of every stream, from its first
// 8-byte boundary, split across threads without losing or repeating one.
TEST(BandwidthProbe, ProbeOverStreamsReadsEachWholeWordOnce) {
  std::vector<uint64_t> a(3000), b(1000), c(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = i + 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 100000 + i;
  for (size_t i = 0; i < c.size(); ++i) c[i] = 7;
  const auto bytes = [](const std::vector<uint64_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 8);
  };
  // b starts 3 bytes in (its first word is skipped) and c ends 4 bytes short
  // (its last word is skipped); the empty stream adds nothing.
  const std::span<const uint8_t> bs = bytes(b).subspan(3);
  const std::span<const uint8_t> cs = bytes(c).first(c.size() * 8 - 4);
  const std::vector<std::span<const uint8_t>> streams{bytes(a), bs, {}, cs};
  uint64_t want = 0;
  for (uint64_t v : a) want += v;
  for (size_t i = 1; i < b.size(); ++i) want += b[i];
  want += 7 * (c.size() - 1);
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    auto probe = cairn::kernels::ReadProbe::over(streams, threads);
    ASSERT_TRUE(probe.is_ok()) << probe.status().message();
    EXPECT_EQ((*probe)->bytes(), (a.size() + b.size() - 1 + c.size() - 1) * 8);
    EXPECT_EQ((*probe)->threads(), threads);
    for (int i = 0; i < 2; ++i) {
      EXPECT_GT((*probe)->pass().gbps, 0);
      EXPECT_EQ((*probe)->checksum(), want) << "pass " << i;
    }
  }
  EXPECT_FALSE(cairn::kernels::ReadProbe::over(streams, 0).is_ok());
  auto small = cairn::kernels::ReadProbe::over(streams, 8);  // under a page per thread
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("page"), std::string::npos);
}

TEST(Int8PeakProbe, MeasuresWhereVnniIsActiveAndSaysWhyNotElsewhere) {
  auto r = cairn::kernels::measure_int8_peak(2, 2, 0.01);
  if (!cairn::isa_enabled(cairn::Isa::Avx512Vnni)) {
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("VNNI"), std::string::npos) << r.status().message();
    return;
  }
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->best_gmacs, 0);
  EXPECT_EQ(r->threads, 2);
  EXPECT_EQ(r->passes, 2);
  EXPECT_FALSE(cairn::kernels::measure_int8_peak(0).is_ok());
  EXPECT_FALSE(cairn::kernels::measure_int8_peak(1, 0).is_ok());
  EXPECT_FALSE(cairn::kernels::measure_int8_peak(1, 1, 0.0).is_ok());
}

}  // namespace
