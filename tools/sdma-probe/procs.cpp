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
#include <utility>

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

namespace {

// After SIGKILL, how long the launcher waits for a rank to go.
constexpr auto kReapLimit = std::chrono::seconds(5);

// The ranks' environment: ours without our two variables, then `me` and
// `secret` (which must outlive the spawns), null-terminated.
std::vector<char*> rank_environment(const std::string& me, const std::string& secret) {
  auto is = [](const char* e, const char* name) {
    return std::strncmp(e, name, std::strlen(name)) == 0 && e[std::strlen(name)] == '=';
  };
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (!is(*e, kLauncherEnv) && !is(*e, kUniqueIdEnv)) env.push_back(*e);
  env.push_back(const_cast<char*>(me.c_str()));
  env.push_back(const_cast<char*>(secret.c_str()));
  env.push_back(nullptr);
  return env;
}

// Ranks start with SIGINT and SIGTERM blocked and at their default
// actions: one that arrives before a rank's handlers exist waits for them
// (install_sweep_signals unblocks) instead of killing it.
void init_rank_attr(posix_spawnattr_t* attr) {
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  posix_spawnattr_init(attr);
  posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setsigmask(attr, &both);
  posix_spawnattr_setsigdefault(attr, &both);
}

// Starts rank r: our own command line, and its place in the group. Returns
// posix_spawn's error (0: started, *pid is the rank's).
int spawn_rank(Context& ctx, const posix_spawnattr_t& attr, char* const* env, int r, pid_t* pid) {
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
  const int e = posix_spawn(pid, "/proc/self/exe", &fa, &attr, argv.data(), env);
  posix_spawn_file_actions_destroy(&fa);
  return e;
}

// Starts ranks 0..nranks-1 into *pids. When one cannot start, the ranks
// started wait for it to join: none of them can go on. They get SIGKILL
// (they may still have their signals blocked) and are reaped.
conccl::Status start_ranks(Context& ctx, int nranks, char* const* env, std::vector<pid_t>* pids) {
  posix_spawnattr_t attr;
  init_rank_attr(&attr);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = -1;
    if (const int e = spawn_rank(ctx, attr, env, r, &pid); e != 0) {
      posix_spawnattr_destroy(&attr);
      for (pid_t p : *pids) kill(p, SIGKILL);
      for (pid_t p : *pids)
        while (waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
        }
      return conccl::error(conccl::Code::unavailable, "starting rank " + std::to_string(r) + ": " + std::strerror(e));
    }
    pids->push_back(pid);
  }
  posix_spawnattr_destroy(&attr);
  return conccl::Status();
}

// The ranks once started, until each has ended or been given up on.
//
// Every rank has its own deadlines (--timeout-ms): a stuck rank ends
// itself, and the others name it once it has gone. The launcher's own
// deadline starts once it has forwarded a signal or a rank has failed:
// the others then have two of their deadlines (the launch they are in,
// the exchange where they agree to stop) and 2 s to end, else SIGKILL.
class RankGroup {
 public:
  RankGroup(const Args& args, Context& ctx, std::vector<pid_t> pids)
      : ctx_(ctx),
        who_("sdma-probe " + std::string(args.command())),
        grace_(std::chrono::milliseconds(2 * args.common().timeout_ms + 2000)),
        pids_(std::move(pids)),
        code_(pids_.size(), -1),
        killed_(pids_.size(), false),
        running_(static_cast<int>(pids_.size())) {}

  // Waits for the ranks; returns the launcher's exit code (run_procs).
  int wait();

 private:
  int nranks() const { return static_cast<int>(pids_.size()); }
  void reap_ended();
  int lost(int r) const;
  int exit_code_of(int r, int status) const;
  void forward_signal();
  void kill_overdue();
  void report_unreaped() const;
  int exit_code() const;

  Context& ctx_;
  const std::string who_;  // "sdma-probe COMMAND", for messages
  const std::chrono::milliseconds grace_;
  const std::vector<pid_t> pids_;
  std::vector<int> code_;     // per rank; -1: running
  std::vector<bool> killed_;  // per rank: SIGKILLed by the launcher
  int running_;
  int forwarded_ = 0;  // the signal forwarded to the ranks; 0: none
  std::optional<Clock::time_point> deadline_, reap_deadline_;
};

int RankGroup::wait() {
  while (running_ > 0) {
    reap_ended();
    if (running_ == 0) break;
    forward_signal();
    kill_overdue();
    if (reap_deadline_ && Clock::now() >= *reap_deadline_) {
      report_unreaped();
      if (!forwarded_) return to_int(ExitCode::fault);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code();
}

// Collects the ranks that have ended since the last look; the first that
// failed starts the launcher's deadline.
void RankGroup::reap_ended() {
  for (int r = 0; r < nranks(); ++r) {
    const auto i = static_cast<size_t>(r);
    if (code_[i] >= 0) continue;
    int status = 0;
    const pid_t got = waitpid(pids_[i], &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    --running_;
    code_[i] = got < 0 ? lost(r) : exit_code_of(r, status);
    if (code_[i] != 0 && !deadline_) deadline_ = Clock::now() + grace_;
  }
}

// waitpid failed (errno): the rank is not our child any more. Cannot
// happen, but the launcher must never spin on it.
int RankGroup::lost(int r) const {
  std::fprintf(ctx_.err, "%s: waiting for rank %d: %s\n", who_.c_str(), r, std::strerror(errno));
  return to_int(ExitCode::fault);
}

// A rank ended by a signal is a fault; named unless the launcher killed it.
int RankGroup::exit_code_of(int r, int status) const {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (!killed_[static_cast<size_t>(r)])
    std::fprintf(ctx_.err, "%s: rank %d was killed by signal %d\n", who_.c_str(), r, WTERMSIG(status));
  return to_int(ExitCode::fault);
}

// The first SIGINT/SIGTERM goes to every rank still running, and starts
// the launcher's deadline.
void RankGroup::forward_signal() {
  const int sig = sweep_signal();
  if (!sig || forwarded_) return;
  forwarded_ = sig;
  for (int r = 0; r < nranks(); ++r)
    if (code_[static_cast<size_t>(r)] < 0) kill(pids_[static_cast<size_t>(r)], sig);
  deadline_ = Clock::now() + grace_;
}

// Past the deadline: SIGKILL to the ranks still there, who then have
// kReapLimit to be reaped.
void RankGroup::kill_overdue() {
  if (!deadline_ || reap_deadline_ || Clock::now() < *deadline_) return;
  for (int r = 0; r < nranks(); ++r) {
    const auto i = static_cast<size_t>(r);
    if (code_[i] >= 0) continue;
    std::fprintf(ctx_.err, "%s: rank %d (pid %d) had not ended %lld ms after %s; killed it (SIGKILL)\n",
                 who_.c_str(), r, static_cast<int>(pids_[i]), static_cast<long long>(grace_.count()),
                 forwarded_ ? sweep_signal_name(forwarded_) : "another rank failed");
    kill(pids_[i], SIGKILL);
    killed_[i] = true;
  }
  reap_deadline_ = Clock::now() + kReapLimit;
}

// Names the ranks that SIGKILL has not ended; the launcher stops waiting.
void RankGroup::report_unreaped() const {
  for (int r = 0; r < nranks(); ++r)
    if (code_[static_cast<size_t>(r)] < 0)
      std::fprintf(ctx_.err, "%s: rank %d (pid %d) is still there %lld s after SIGKILL (stuck in the "
                             "kernel?); not waiting for it\n",
                   who_.c_str(), r, static_cast<int>(pids_[static_cast<size_t>(r)]),
                   static_cast<long long>(kReapLimit.count()));
}

// A signal: the run ends as a single-process sweep's does, 128 + signal
// (rank 0 has written what it finished). Else the first rank's failure.
int RankGroup::exit_code() const {
  if (const int sig = forwarded_ ? forwarded_ : sweep_signal()) return 128 + sig;
  for (int c : code_)
    if (c != 0) return c < 0 ? to_int(ExitCode::fault) : c;
  return 0;
}

}  // namespace

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
  const std::vector<char*> env = rank_environment(me, secret);
  std::vector<pid_t> pids;
  if (conccl::Status st = start_ranks(ctx, nranks, env.data(), &pids); !st.ok()) return fail(args, ctx, st);
  return RankGroup(args, ctx, std::move(pids)).wait();
}

}  // namespace probe
