// tests/cli/client_cli_test.cpp — `cairn client` against a Serving service in this process (a
// FakeBackend model and a FakeServableRuntime servable): typed inputs, .npy files both ways,
// output lines, several instances, versions, streaming, and one-line errors.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "api/fake_backend.h"
#include "api/fake_servable_runtime.h"
#include "api/grpc_serving_service.h"
#include "cli/cli_process.h"
#include "core/npy.h"
#include "test_util.h"

namespace cairn {
namespace {

namespace fs = std::filesystem;
using test::run_cairn;

class ClientCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::cairn_binary())) << test::cairn_binary() << " is not built";
    service_ = api::make_serving_service(backend_, &runtime_);
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    dir_ = test::temp_dir("client_cli");
  }
  void TearDown() override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
    }
  }
  test::Proc client(std::vector<std::string> args) {
    std::vector<std::string> all = {"client", "--address", "127.0.0.1:" + std::to_string(port_),
                                    "--timeout", "20"};
    all.insert(all.end(), args.begin(), args.end());
    return run_cairn(all);
  }
  std::string npy(const std::string& name, const values::Tensor& t) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(values::write_npy_file(path, t).is_ok());
    return path;
  }

  api::test::FakeBackend backend_;
  api::test::FakeServableRuntime runtime_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  fs::path dir_;
};

TEST_F(ClientCli, NpyInputsAndOutputs) {
  const auto a = npy("a.npy", values::make_tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  const auto b = npy("b.npy", values::make_tensor(std::vector<float>{10, 20, 30, 40.5f}, {2, 2}));
  const fs::path out = dir_ / "out";
  auto r = client({"--servable", "calc", "--method", "add", "--input", "x1=@" + a, "--input",
                   "x2=@" + b, "--output-dir", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "version: int 2\ny: float32 [2, 2] [[11, 22], [33, 44.5]]\n");
  auto y = values::read_npy_file((out / "y.npy").string());
  ASSERT_TRUE(y.is_ok()) << y.status().message();
  EXPECT_EQ(*y, values::make_tensor(std::vector<float>{11, 22, 33, 44.5f}, {2, 2}));

  // Several instances: each line names its instance; files are numbered.
  r = client({"--servable", "calc", "--method", "add", "--input", "x1=@" + a, "--input", "x2=@" + b,
              "--instances", "2", "--output-dir", out.string(), "--version", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("instance 0: version: int 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("instance 1: y: float32 [2, 2]"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out / "0_y.npy"));
  EXPECT_TRUE(fs::exists(out / "1_y.npy"));
  EXPECT_EQ(runtime_.last_call().version, 1u);
  EXPECT_EQ(runtime_.last_call().instances.size(), 2u);
}

TEST_F(ClientCli, TypedScalarsStringsAndBytes) {
  const fs::path raw = dir_ / "raw.bin";
  std::ofstream(raw, std::ios::binary) << std::string("\x01\x02\x03", 3);
  auto r = client({"--servable", "calc", "--method", "echo", "--input", "i=int:5", "--input",
                   "f=float:0.5", "--input", "b=bool:true", "--input", "s=say \"hi\"", "--input",
                   "n=42", "--input", "raw=@" + raw.string(), "--input", "t=str:int:7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "b: bool true\nf: float 0.5\ni: int 5\nn: str \"42\"\nraw: bytes (3 bytes)\n"
            "s: str \"say \\\"hi\\\"\"\nt: str \"int:7\"\n");
  const auto call = runtime_.last_call();
  ASSERT_EQ(call.instances.size(), 1u) << call.method;
  const auto& in = call.instances[0];
  ASSERT_EQ(in.count("i"), 1u) << call.method;
  ASSERT_EQ(in.count("raw"), 1u) << call.method;
  EXPECT_EQ(in.at("i"), values::Value(int64_t(5))) << values::describe(in.at("i"));
  EXPECT_EQ(in.at("raw"), values::Value(values::Bytes{std::string("\x01\x02\x03", 3)}))
      << values::describe(in.at("raw"));
}

TEST_F(ClientCli, LongTensorsAreCutShort) {
  std::vector<int32_t> v(100);
  for (int i = 0; i < 100; ++i) v[static_cast<size_t>(i)] = i;
  const auto t = npy("t.npy", values::make_tensor(v, {10, 10}));
  auto r = client({"--servable", "calc", "--method", "echo", "--input", "t=@" + t});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("t: int32 [10, 10] [[0, 1, 2", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("[60, 61, 62, 63, ...]]\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("64"), std::string::npos) << r.out;
}

TEST_F(ClientCli, FailedInstancesAndCallsAreReported) {
  auto r =
      client({"--servable", "calc", "--method", "add", "--input", "x1=int:1", "--instances", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "instance 0: error: x1 and x2 must be float32 tensors of one shape (400)\n"
            "instance 1: error: x1 and x2 must be float32 tensors of one shape (400)\n");
  EXPECT_NE(r.err.find("2 of 2 instances failed"), std::string::npos) << r.err;

  test::expect_one_error_line(
      client({"--servable", "calc", "--method", "add", "--version", "3", "--input", "x1=int:1"}),
      "version 3");
  test::expect_one_error_line(client({"--servable", "calc", "--method", "add", "--input",
                                      "x1=@" + (dir_ / "none.npy").string()}),
                              "cannot open");
  test::expect_one_error_line(
      client({"--servable", "calc", "--method", "add", "--input", "x=int:z"}),
      "must be an integer");
  std::ofstream(dir_ / "bad.npy") << "not numpy";
  test::expect_one_error_line(client({"--servable", "calc", "--method", "add", "--input",
                                      "x=@" + (dir_ / "bad.npy").string()}),
                              "not a valid .npy file");
  test::expect_one_error_line(client({"--servable", "calc", "--method", "add", "--instances", "0"}),
                              "--instances");
}

TEST_F(ClientCli, StreamPrintsTextThenTheOutputs) {
  auto r = client({"--servable", "calc", "--method", "stream", "--stream", "--input", "prompt=p"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "p-a-b\ntext: str \"p-a-b\"\n");
  EXPECT_TRUE(runtime_.last_call().stream);
}

TEST_F(ClientCli, ModelsPrintAsBeforeAndListShowsVersions) {
  auto r = client({"--servable", "fake", "--input", "prompt=x", "--input", "max_tokens=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world\n");
  EXPECT_EQ(backend_.last_request().max_tokens, 4);
  r = client({"--servable", "fake", "--stream", "--input", "prompt=@x"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world\n");
  EXPECT_EQ(std::get<std::string>(backend_.last_request().prompt), "@x");  // typed by name

  r = client({"--list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "fake\tmethods=generate,chat\tn_ctx=128\n"
            "calc\tmethods=add,echo,stream,hold\tn_ctx=0\tversions=1,2\n");
}

}  // namespace
}  // namespace cairn
