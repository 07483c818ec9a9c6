// tools/sdma-probe/procs.cpp - the --procs launcher.
#include "procs.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "sweep/sweep_signal.hpp"

extern char** environ;

namespace probe {
namespace {

// The launcher's pid, in its ranks' environment (follow_launcher).
constexpr const char* kLauncherEnv = "SDMA_PROBE_LAUNCHER_PID";
// The id reaches the ranks in their environment, never in argv: any user
// reads /proc/PID/cmdline, only the owner /proc/PID/environ (proc(5)), and
// the id is the communicator's secret (docs/multiprocess.md).
constexpr const char* kUniqueIdEnv = "SDMA_PROBE_UNIQUE_ID";

using Clock = std::chrono::steady_clock;

}  // namespace

conccl::Result<int> procs_of(const Args& args) {
  conccl::Result<std::optional<int64_t>> n = args.get_int_in_range("procs", 1, kMaxProcs);
  if (n.ok()) return static_cast<int>(n->value_or(0));
  conccl::Result<std::optional<int64_t>> any = args.get_int("procs");
  if (any.ok() && any->has_value() && **any > kMaxProcs)
    return conccl::error(conccl::Code::invalid_argument,
                         "--procs " + std::to_string(**any) + " is more than " + std::to_string(kMaxProcs) +
                             " processes, the most one group can have (each rank opens its device at its own "
                             "process slot, 0.." + std::to_string(kMaxProcs - 1) +
                             "); give --procs 1.." + std::to_string(kMaxProcs) +
                             ", or --ranks N (up to 64 ranks in one process)");
  return n.status();
}

conccl::Result<std::optional<ProcRank>> proc_rank_of(const Args& args) {
  const bool has_rank = args.has("rank"), has_id = args.has("unique-id");
  if (!has_rank && !has_id) return std::optional<ProcRank>();
  if (has_rank != has_id || !args.has("procs"))
    return conccl::error(conccl::Code::invalid_argument,
                         "--rank and --unique-id come together, with --procs (the --procs launcher sets them)");
  conccl::Result<int> n = procs_of(args);
  if (!n.ok()) return n.status();
  conccl::Result<int64_t> r = args.get_int_in_range("rank", 0, *n - 1, 0);
  if (!r.ok()) return r.status();
  // "--unique-id env": the id is in SDMA_PROBE_UNIQUE_ID (what the launcher does).
  std::string text = args.value("unique-id").value_or("");
  if (text == "env") {
    const char* v = std::getenv(kUniqueIdEnv);
    if (!v)
      return conccl::error(conccl::Code::invalid_argument,
                           std::string("--unique-id env, but ") + kUniqueIdEnv + " is not set");
    text = v;
  }
  conccl::Result<conccl::UniqueId> id = conccl::UniqueId::parse(text);
  if (!id.ok()) return id.status();
  return std::optional<ProcRank>(ProcRank{static_cast<int>(*r), *n, *id});
}

conccl::Status follow_launcher() {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    return conccl::error(conccl::Code::internal, std::string("prctl(PR_SET_PDEATHSIG): ") + std::strerror(errno));
  // The launcher may have ended before the prctl: then this process has
  // another parent already, and nothing would end it.
  const char* launcher = std::getenv(kLauncherEnv);
  if (launcher && std::to_string(getppid()) != launcher)
    return conccl::error(conccl::Code::unavailable,
                         std::string("the --procs launcher (pid ") + launcher + ") has ended; this rank ends too");
  return conccl::Status();
}

int run_procs(const Args& args, Context& ctx, int nranks) {
  conccl::Result<conccl::UniqueId> id = conccl::make_unique_id();
  if (!id.ok()) return fail(args, ctx, id.status());
  // From here on a signal is recorded, and forwarded once every rank runs.
  install_sweep_signals();
  std::fflush(ctx.out);
  std::fflush(ctx.err);
  // The ranks' environment: ours, and our pid (follow_launcher).
  const std::string me = std::string(kLauncherEnv) + "=" + std::to_string(getpid());
  const std::string secret = std::string(kUniqueIdEnv) + "=" + id->to_string();
  auto is = [](const char* e, const char* name) {
    return std::strncmp(e, name, std::strlen(name)) == 0 && e[std::strlen(name)] == '=';
  };
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (!is(*e, kLauncherEnv) && !is(*e, kUniqueIdEnv)) env.push_back(*e);
  env.push_back(const_cast<char*>(me.c_str()));
  env.push_back(const_cast<char*>(secret.c_str()));
  env.push_back(nullptr);
  // Ranks start with SIGINT and SIGTERM blocked and at their default
  // actions: one that arrives before a rank's handlers exist waits for them
  // (install_sweep_signals unblocks) instead of killing it.
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setsigmask(&attr, &both);
  posix_spawnattr_setsigdefault(&attr, &both);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> w = original_words();
    w.insert(w.end(), {"--rank", std::to_string(r), "--unique-id", "env"});
    std::vector<char*> argv;
    for (std::string& s : w) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    // Rank 0 prints the table; the others' stdout would repeat it.
    if (r > 0) posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (ctx.out != stdout) posix_spawn_file_actions_adddup2(&fa, fileno(ctx.out), STDOUT_FILENO);
    pid_t pid = -1;
    const int e = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) {
      posix_spawnattr_destroy(&attr);
      // The ranks started wait for this one to join: none of them can go
      // on. SIGKILL (they may still have their signals blocked) and reap.
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids)
        while (waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
        }
      return fail(args, ctx, conccl::error(conccl::Code::unavailable,
                                           "starting rank " + std::to_string(r) + ": " + std::strerror(e)));
    }
    pids.push_back(pid);
  }
  posix_spawnattr_destroy(&attr);

  // Every rank has its own deadlines (--timeout-ms): a stuck rank ends
  // itself, and the others name it once it has gone. The launcher's own
  // deadline starts once it has forwarded a signal or a rank has failed:
  // the others then have two of their deadlines (the launch they are in,
  // the exchange where they agree to stop) and 2 s to end, else SIGKILL.
  const auto grace = std::chrono::milliseconds(2 * args.common().timeout_ms + 2000);
  const auto reap_limit = std::chrono::seconds(5);  // after SIGKILL
  std::vector<int> code(static_cast<size_t>(nranks), -1);  // -1: running
  std::vector<bool> killed(static_cast<size_t>(nranks), false);
  int running = nranks, forwarded = 0;
  std::optional<Clock::time_point> deadline, reap_deadline;
  while (running > 0) {
    for (int r = 0; r < nranks; ++r) {
      const auto i = static_cast<size_t>(r);
      if (code[i] >= 0) continue;
      int status = 0;
      const pid_t got = waitpid(pids[i], &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      --running;
      if (got < 0) {  // not our child any more: cannot happen, but never spin on it
        std::fprintf(ctx.err, "sdma-probe %.*s: waiting for rank %d: %s\n", static_cast<int>(args.command().size()),
                     args.command().data(), r, std::strerror(errno));
        code[i] = to_int(ExitCode::fault);
      } else if (WIFEXITED(status)) {
        code[i] = WEXITSTATUS(status);
      } else {
        if (!killed[i])
          std::fprintf(ctx.err, "sdma-probe %.*s: rank %d was killed by signal %d\n",
                       static_cast<int>(args.command().size()), args.command().data(), r, WTERMSIG(status));
        code[i] = to_int(ExitCode::fault);
      }
      if (code[i] != 0 && !deadline) deadline = Clock::now() + grace;
    }
    if (running == 0) break;
    if (const int sig = sweep_signal(); sig && !forwarded) {
      forwarded = sig;
      for (int r = 0; r < nranks; ++r)
        if (code[static_cast<size_t>(r)] < 0) kill(pids[static_cast<size_t>(r)], sig);
      deadline = Clock::now() + grace;
    }
    if (deadline && !reap_deadline && Clock::now() >= *deadline) {
      for (int r = 0; r < nranks; ++r) {
        const auto i = static_cast<size_t>(r);
        if (code[i] >= 0) continue;
        std::fprintf(ctx.err, "sdma-probe %.*s: rank %d (pid %d) had not ended %lld ms after %s; killed it (SIGKILL)\n",
                     static_cast<int>(args.command().size()), args.command().data(), r, static_cast<int>(pids[i]),
                     static_cast<long long>(grace.count()),
                     forwarded ? sweep_signal_name(forwarded) : "another rank failed");
        kill(pids[i], SIGKILL);
        killed[i] = true;
      }
      reap_deadline = Clock::now() + reap_limit;
    }
    if (reap_deadline && Clock::now() >= *reap_deadline) {
      for (int r = 0; r < nranks; ++r)
        if (code[static_cast<size_t>(r)] < 0)
          std::fprintf(ctx.err, "sdma-probe %.*s: rank %d (pid %d) is still there %lld s after SIGKILL (stuck in the "
                                "kernel?); not waiting for it\n",
                       static_cast<int>(args.command().size()), args.command().data(), r,
                       static_cast<int>(pids[static_cast<size_t>(r)]), static_cast<long long>(reap_limit.count()));
      if (!forwarded) return to_int(ExitCode::fault);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A signal: the run ends as a single-process sweep's does, 128 + signal
  // (rank 0 has written what it finished).
  if (const int sig = forwarded ? forwarded : sweep_signal()) return 128 + sig;
  for (int c : code)
    if (c != 0) return c < 0 ? to_int(ExitCode::fault) : c;
  return 0;
}

}  // namespace probe
