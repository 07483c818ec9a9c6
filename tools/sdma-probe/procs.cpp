// tools/sdma-probe/procs.cpp - the --procs launcher.
#include "procs.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

extern char** environ;

namespace probe {

conccl::Result<std::optional<ProcRank>> proc_rank_of(const Args& args) {
  const bool has_rank = args.has("rank"), has_id = args.has("unique-id");
  if (!has_rank && !has_id) return std::optional<ProcRank>();
  if (has_rank != has_id || !args.has("procs"))
    return conccl::error(conccl::Code::invalid_argument,
                         "--rank and --unique-id come together, with --procs (the --procs launcher sets them)");
  conccl::Result<int64_t> n = args.get_int_in_range("procs", 1, 64, 0);
  if (!n.ok()) return n.status();
  conccl::Result<int64_t> r = args.get_int_in_range("rank", 0, *n - 1, 0);
  if (!r.ok()) return r.status();
  conccl::Result<conccl::UniqueId> id = conccl::UniqueId::parse(args.value("unique-id").value_or(""));
  if (!id.ok()) return id.status();
  return std::optional<ProcRank>(ProcRank{static_cast<int>(*r), static_cast<int>(*n), *id});
}

int run_procs(const Args& args, Context& ctx, int nranks) {
  conccl::Result<conccl::UniqueId> id = conccl::make_unique_id();
  if (!id.ok()) return fail(args, ctx, id.status());
  std::fflush(ctx.out);
  std::fflush(ctx.err);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    std::vector<std::string> w = original_words();
    w.insert(w.end(), {"--rank", std::to_string(r), "--unique-id", id->to_string()});
    std::vector<char*> argv;
    for (std::string& s : w) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    // Rank 0 prints the table; the others' stdout would repeat it.
    if (r > 0) posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (ctx.out != stdout) posix_spawn_file_actions_adddup2(&fa, fileno(ctx.out), STDOUT_FILENO);
    pid_t pid = -1;
    const int e = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) {
      for (pid_t p : pids) kill(p, SIGTERM);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return fail(args, ctx, conccl::error(conccl::Code::unavailable,
                                           "starting rank " + std::to_string(r) + ": " + std::strerror(e)));
    }
    pids.push_back(pid);
  }
  // Every rank has its own deadlines (--timeout-ms): a stuck rank ends
  // itself, and the others name it once it has gone.
  int rc = 0;
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    while (waitpid(pids[static_cast<size_t>(r)], &status, 0) < 0 && errno == EINTR) {
    }
    int code = 0;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
    } else {
      std::fprintf(ctx.err, "sdma-probe: rank %d was killed by signal %d\n", r, WTERMSIG(status));
      code = to_int(ExitCode::fault);
    }
    if (rc == 0) rc = code;
  }
  return rc;
}

}  // namespace probe
