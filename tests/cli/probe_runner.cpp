// tests/cli/probe_runner.cpp - fork+exec of sdma-probe for the CLI tests.
#include "probe_runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#ifndef SDMA_PROBE_PATH
#error "SDMA_PROBE_PATH must name the sdma-probe binary"
#endif

namespace probe_test {
namespace {

std::string& scratch_dir() {
  static std::string dir;
  return dir;
}

class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (scratch_dir().empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(scratch_dir(), ec);
    scratch_dir().clear();
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// Waits for pid; kills it once limit_s has passed (limit_s <= 0: no limit).
int wait_with_limit(pid_t pid, double limit_s, bool* timed_out) {
  int status = 0;
  if (limit_s <= 0) return waitpid(pid, &status, 0) == pid ? status : -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= until) {
      *timed_out = true;
      kill(pid, SIGKILL);
      return waitpid(pid, &status, 0) == pid ? status : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

const std::string& scratch() {
  std::string& dir = scratch_dir();
  if (dir.empty()) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/test_cli.XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    dir = tmpl;
  }
  return dir;
}

std::string write_file(const std::string& name, std::string_view text) {
  const std::string path = scratch() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::vector<std::string> flag_names(const std::string& text) {
  std::vector<std::string> out;
  auto name_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; };
  for (size_t i = text.find("--"); i != std::string::npos; i = text.find("--", i)) {
    size_t j = i + 2;
    if (j < text.size() && text[j] >= 'a' && text[j] <= 'z') {
      while (j < text.size() && name_char(text[j])) ++j;
      out.push_back(text.substr(i, j - i));
    }
    i = j;
  }
  return out;
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Started spawn(const std::vector<std::string>& args, std::string_view in, const std::string& stdout_to = "") {
  static int counter = 0;
  const int id = counter++;
  const std::string base = scratch() + "/run" + std::to_string(id);
  const std::string in_path = write_file("run" + std::to_string(id) + ".in", in);
  Started s;
  s.out_path = base + ".out";
  s.err_path = base + ".err";

  std::vector<std::string> words = {SDMA_PROBE_PATH};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  s.t0 = now_s();
  const pid_t pid = fork();
  if (pid == 0) {
    const int i = open(in_path.c_str(), O_RDONLY);
    const int o = stdout_to.empty() ? open(s.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)
                                    : open(stdout_to.c_str(), O_WRONLY);
    const int e = open(s.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // In the scratch directory, so that files the command writes (--json
    // FILE with a random name in the property test) land there.
    if (i < 0 || o < 0 || e < 0 || chdir(scratch().c_str()) != 0) _exit(126);
    dup2(i, 0);
    dup2(o, 1);
    dup2(e, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  s.pid = pid;
  return s;
}

}  // namespace

Started start(const std::vector<std::string>& args) { return spawn(args, ""); }

Outcome probe_stdout_to(const std::vector<std::string>& args, const std::string& stdout_path, double limit_s) {
  return finish(spawn(args, "", stdout_path), limit_s);
}

Outcome finish(const Started& s, double limit_s) {
  Outcome r;
  if (s.pid < 0) return r;
  const int status = wait_with_limit(s.pid, limit_s, &r.timed_out);
  r.seconds = now_s() - s.t0;
  if (status == -1) return r;
  r.signaled = WIFSIGNALED(status);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(s.out_path);
  r.err = read_file(s.err_path);
  return r;
}

Outcome probe(const std::vector<std::string>& args, std::string_view in, double limit_s) {
  return finish(spawn(args, in), limit_s);
}

std::vector<std::string> data_rows(const std::string& out) {
  std::vector<std::string> rows;
  size_t b = 0;
  while (b < out.size()) {
    size_t e = out.find('\n', b);
    if (e == std::string::npos) e = out.size();
    if (e > b && out[b] != '#') rows.push_back(out.substr(b, e - b));
    b = e + 1;
  }
  return rows;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream ss(line);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

}  // namespace probe_test
