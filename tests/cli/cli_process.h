// Runs the built cairn binary as a child process for the CLI tests: no shell,
// stdout through a pipe and stderr through a file, so neither can fill up and
// block the child.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace cairn::test {

struct Proc {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
};

inline std::string cairn_binary() { return std::string(CAIRN_BINARY_DIR) + "/cairn"; }

// `env` adds or overrides environment variables of the child.
inline Proc run_cairn(const std::vector<std::string>& args,
                      const std::map<std::string, std::string>& env = {}) {
  namespace fs = std::filesystem;
  static int counter = 0;
  const fs::path err_file =
      fs::path(CAIRN_BINARY_DIR) / "test-tmp" /
      ("cli-stderr-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::create_directories(err_file.parent_path());
  int out_pipe[2];
  if (pipe(out_pipe) != 0) return {};
  const std::string bin = cairn_binary();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    close(out_pipe[0]);
    close(out_pipe[1]);
    int fd = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  Proc r;
  char buf[4096];
  for (ssize_t n; (n = read(out_pipe[0], buf, sizeof(buf))) > 0;) r.out.append(buf, (size_t)n);
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream f(err_file, std::ios::binary);
  r.err.assign(std::istreambuf_iterator<char>(f), {});
  fs::remove(err_file);
  return r;
}

// A failed command: non-zero exit, nothing on stdout, exactly one stderr line
// that says "error" and contains `needle`.
inline void expect_one_error_line(const Proc& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("error"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
}

}  // namespace cairn::test
