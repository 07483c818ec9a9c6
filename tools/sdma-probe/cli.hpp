// tools/sdma-probe/cli.hpp - the sdma-probe command-line framework.
//
// A subcommand is one .cpp file in this folder that registers itself:
//
//   namespace {
//   int run_foo(const probe::Args& args, probe::Context& ctx) { ... }
//   const probe::Registration reg({
//       .name = "foo",
//       .summary = "one line for `sdma-probe --help`",
//       .usage = "sdma-probe foo [--bar N] FILE...",
//       .details = "longer text for `sdma-probe help foo` (optional)",
//       .flags = {{.name = "bar", .value = "N", .help = "how many"}},
//       .run = run_foo,
//   });
//   }  // namespace
//
// The framework parses the command line against the command's flags plus the
// shared ones (--backend, --preset, --json, --timeout-ms), handles --help, and
// maps errors to the exit codes of docs/sdma-probe.md.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conccl/status.hpp"

namespace probe {

// Exit codes, the same for every subcommand (docs/sdma-probe.md).
enum class ExitCode : int {
  ok = 0,             // success
  verify_failed = 1,  // a verification failed (data mismatch)
  usage = 2,          // usage error or bad input
  timeout = 3,        // a deadline passed (hang diagnosed on stderr)
  fault = 4,          // an engine or device fault (also: out of resources, internal error)
  unavailable = 5,    // the backend is not available here
};
inline int to_int(ExitCode c) { return static_cast<int>(c); }

// Which exit code a library error gives.
ExitCode exit_code_for(conccl::Code c);

// ---------------------------------------------------------------------------
// Values

// Parses a size: decimal or 0x-hex bytes; decimal numbers may carry a K, M, G
// or T suffix (powers of 1024, case-insensitive, optionally followed by "B" or
// "iB": 4K, 4k, 4KiB, 4KB = 4096). A bare trailing "B" is allowed ("512B").
// std::nullopt when malformed or when the value overflows 64 bits.
std::optional<uint64_t> parse_size(std::string_view s);
// "4 KiB", "1.5 MiB", "17 B": for humans.
std::string format_size(uint64_t bytes);

// Decimal or 0x-hex unsigned / signed integers (the whole string).
std::optional<uint64_t> parse_uint(std::string_view s);
std::optional<int64_t> parse_int(std::string_view s);

// A JSON string literal, quotes included.
std::string json_string(std::string_view s);
// A JSON number with `decimals` digits after the point; `null` for an
// infinity or NaN (a zero time's bandwidth), which JSON cannot express.
std::string json_number(double v, int decimals);

// ---------------------------------------------------------------------------
// Flags and arguments

struct FlagSpec {
  std::string_view name;        // without the leading "--"
  std::string_view value = {};  // placeholder shown in help ("N", "FILE"); empty: a switch
  std::string_view help = {};
  bool repeatable = false;      // may be given more than once (see Args::values)
  // A one-letter alias, as nccl-tests spells its flags ('d': -d float or
  // -dfloat for --dtype float); 0: none. Only for flags that take a value.
  char short_name = 0;
};

// A command's flags: a shared set (device_flag_specs(), gen_flag_specs())
// followed by the command's own, in the order --help lists them.
inline std::vector<FlagSpec> with_flags(std::vector<FlagSpec> shared, std::initializer_list<FlagSpec> own) {
  shared.insert(shared.end(), own);
  return shared;
}

enum class Backend { emu, kfd, nv };
std::string_view backend_name(Backend b);

inline constexpr uint64_t kDefaultTimeoutMs = 10000;
// --timeout-ms is 1..kMaxTimeoutMs (24 h): 0 would fail every wait at once,
// and larger values would overflow the clock arithmetic of a deadline.
inline constexpr int64_t kMaxTimeoutMs = 24 * 3600 * 1000;

// The flags every subcommand accepts (parsed by the framework).
struct Common {
  Backend backend = Backend::emu;  // --backend emu|kfd|nv
  bool backend_given = false;
  std::string preset;               // --preset NAME (empty: none)
  bool json = false;                // --json
  uint64_t timeout_ms = kDefaultTimeoutMs;  // --timeout-ms N
  bool timeout_given = false;
};

// The parsed command line of one subcommand.
class Args {
 public:
  std::string_view command() const { return command_; }

  // True when the flag was given (switch or value flag).
  bool has(std::string_view flag) const;
  // The value of a value flag (the last one for repeatable flags).
  std::optional<std::string> value(std::string_view flag) const;
  // Every value of a flag, in command-line order.
  std::vector<std::string> values(std::string_view flag) const;
  // Arguments that are not flags, in order ("-" included as given).
  const std::vector<std::string>& positionals() const { return positionals_; }

  // Typed getters. std::nullopt when the flag is absent; an invalid_argument
  // error naming the flag when the value is malformed.
  conccl::Result<std::optional<uint64_t>> get_uint(std::string_view flag) const;
  conccl::Result<std::optional<int64_t>> get_int(std::string_view flag) const;
  conccl::Result<std::optional<uint64_t>> get_size(std::string_view flag) const;
  conccl::Result<std::optional<double>> get_double(std::string_view flag) const;
  // With a default for the absent case.
  conccl::Result<uint64_t> get_uint(std::string_view flag, uint64_t fallback) const;
  conccl::Result<int64_t> get_int(std::string_view flag, int64_t fallback) const;
  conccl::Result<uint64_t> get_size(std::string_view flag, uint64_t fallback) const;
  // An integer that must lie in [lo, hi] (indices, counts): checked on the
  // full 64-bit value before any narrowing, so 4294967296, 2^64-1 or -1 never
  // wrap into range. Errors (invalid_argument, exit 2) name the flag and the
  // range: "--gpu 4294967296 is out of range: give 0..63". Callers may narrow
  // the result to any type that holds [lo, hi].
  conccl::Result<std::optional<int64_t>> get_int_in_range(std::string_view flag, int64_t lo,
                                                          int64_t hi) const;
  conccl::Result<int64_t> get_int_in_range(std::string_view flag, int64_t lo, int64_t hi,
                                           int64_t fallback) const;

  const Common& common() const { return common_; }

  // Parses `argv` (the words after the subcommand name) against `specs`,
  // which must include the shared flags. "--" ends the flags; "-" is a
  // positional. "-X VALUE" and "-XVALUE" are the flag whose short_name is X. Errors: unknown flag, missing value, value given to a switch,
  // a non-repeatable flag given twice, bad shared-flag values.
  static conccl::Result<Args> parse(std::string_view command, const std::vector<std::string>& argv,
                                    const std::vector<FlagSpec>& specs);

 private:
  conccl::Status apply_common();

  std::string command_;
  std::vector<std::pair<std::string, std::string>> flags_;  // name, value ("" for switches)
  std::vector<std::string> positionals_;
  Common common_;
};

// The shared flags, in help order.
const std::vector<FlagSpec>& common_flags();

// ---------------------------------------------------------------------------
// Subcommands

// The command line this process was started with (set by main_entry), for
// a launcher that starts copies of itself (--procs).
const std::vector<std::string>& original_words();
std::vector<std::string>& original_words_storage();

struct Context {
  FILE* out = stdout;  // results
  FILE* err = stderr;  // diagnostics, progress
  FILE* in = stdin;    // "-" and default input
};

using RunFn = int (*)(const Args& args, Context& ctx);

struct Command {
  std::string_view name;
  std::string_view summary;       // one line
  std::string_view usage;         // "sdma-probe NAME [options] ..."
  std::string_view details = {};  // more text for `help NAME`
  std::vector<FlagSpec> flags = {};
  RunFn run = nullptr;
  int order = 100;                // position in the --help list (then by name)
};

// Registers a command at static-initialisation time (one per cmd_*.cpp).
struct Registration {
  explicit Registration(Command c);
};

// Every registered command, in help order.
std::vector<const Command*> commands();
const Command* find_command(std::string_view name);

// Prints `sdma-probe help NAME` text.
void print_command_help(const Command& c, FILE* f);
// Prints the top-level usage with the command list.
void print_usage(FILE* f);

// Prints "sdma-probe CMD: <message>" on ctx.err and returns the exit code
// for the status's code.
int fail(const Args& args, Context& ctx, const conccl::Status& st);
// A timeout (exit 3) does not return: after the message fail() calls
// end_after_hang, so that a packet still in flight cannot keep the process
// alive past its deadline.
// Flushes every output stream and ends the process at once with `code`
// (_exit: no destructors, so no device teardown waiting on an engine).
[[noreturn]] void end_after_hang(ExitCode code);
// The same for a usage error (exit 2) given as text.
int usage_error(const Args& args, Context& ctx, std::string_view message);

// Inputs: calls fn(name, file) for each positional ("-" = ctx.in, named
// "<stdin>"), or once for ctx.in when there are none. A file that cannot be
// opened is reported on ctx.err as "NAME: cannot open: REASON" and skipped.
// Returns the number of files that could not be opened.
template <typename Fn>
int for_each_input(const Args& args, Context& ctx, Fn&& fn);
// Reads one line (without its '\n'); false at end of file.
bool read_line(FILE* f, std::string* line);
// For commands whose output is text by nature (asm, dis, exec, demo): a usage
// error when --json was given, else -1 (go on). Every command honours --json
// or refuses it; none ignores it.
int refuse_json(const Args& args, Context& ctx, std::string_view what);
// Reads a whole file.
std::string read_all(FILE* f);

// Runs the whole program: dispatch on argv[1].
int main_entry(int argc, char** argv);

// ---------------------------------------------------------------------------

FILE* open_input(const std::string& path, Context& ctx);  // null + message on failure

template <typename Fn>
int for_each_input(const Args& args, Context& ctx, Fn&& fn) {
  std::vector<std::string> paths = args.positionals();
  if (paths.empty()) paths.push_back("-");
  int failed = 0;
  for (const std::string& p : paths) {
    if (p == "-") {
      fn(std::string("<stdin>"), ctx.in);
      continue;
    }
    FILE* f = open_input(p, ctx);
    if (!f) {
      ++failed;
      continue;
    }
    fn(p, f);
    std::fclose(f);
  }
  return failed;
}

}  // namespace probe
