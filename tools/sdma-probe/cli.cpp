// tools/sdma-probe/cli.cpp - argument parsing, the command registry, dispatch.
#include "cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>

#ifndef CONCCL_VERSION
#define CONCCL_VERSION "unknown"
#endif

namespace probe {

using conccl::Code;
using conccl::Result;
using conccl::Status;

ExitCode exit_code_for(Code c) {
  switch (c) {
    case Code::ok: return ExitCode::ok;
    case Code::verify_failed: return ExitCode::verify_failed;
    case Code::invalid_argument:
    case Code::out_of_range:
    case Code::not_found: return ExitCode::usage;
    case Code::timeout: return ExitCode::timeout;
    case Code::unavailable: return ExitCode::unavailable;
    case Code::device_fault:
    case Code::resource_exhausted:
    case Code::busy:
    case Code::internal: return ExitCode::fault;
  }
  return ExitCode::fault;
}

// ---------------------------------------------------------------------------
// Values

std::optional<uint64_t> parse_uint(std::string_view s) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty() || s.front() == '+' || s.front() == '-') return std::nullopt;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_int(std::string_view s) {
  const bool neg = !s.empty() && s.front() == '-';
  if (neg) s.remove_prefix(1);
  std::optional<uint64_t> u = parse_uint(s);
  if (!u) return std::nullopt;
  if (neg) {
    if (*u > uint64_t(INT64_MAX) + 1) return std::nullopt;
    return static_cast<int64_t>(~*u + 1);
  }
  if (*u > uint64_t(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(*u);
}

std::optional<uint64_t> parse_size(std::string_view s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) return parse_uint(s);
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  std::optional<uint64_t> n = parse_uint(s.substr(0, digits));
  if (!n) return std::nullopt;
  std::string suffix(s.substr(digits));
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  unsigned shift = 0;
  if (!suffix.empty() && suffix != "b") {
    switch (suffix[0]) {
      case 'k': shift = 10; break;
      case 'm': shift = 20; break;
      case 'g': shift = 30; break;
      case 't': shift = 40; break;
      default: return std::nullopt;
    }
    const std::string_view rest = std::string_view(suffix).substr(1);
    if (!rest.empty() && rest != "b" && rest != "ib") return std::nullopt;
  }
  if (shift && (*n >> (64 - shift)) != 0) return std::nullopt;
  return *n << shift;
}

std::string format_size(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  uint64_t whole = bytes;
  while (whole >= 1024 && u < 6) {
    whole >>= 10;
    ++u;
  }
  char buf[48];
  if (u == 0 || (bytes & ((uint64_t(1) << (10 * u)) - 1)) == 0) {
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(whole), kUnits[u]);
  } else {
    const double v = static_cast<double>(bytes) / static_cast<double>(uint64_t(1) << (10 * u));
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v, int decimals) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 17), v);
  return buf;
}

// ---------------------------------------------------------------------------
// Args

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::emu: return "emu";
    case Backend::kfd: return "kfd";
    case Backend::nv: return "nv";
  }
  return "?";
}

const std::vector<FlagSpec>& common_flags() {
  static const std::vector<FlagSpec> kFlags = {
      {.name = "backend", .value = "emu|kfd|nv",
       .help = "device backend: emulated node (default), AMD KFD, NVIDIA copy engines"},
      {.name = "preset", .value = "NAME", .help = "named configuration preset"},
      {.name = "json", .help = "machine-readable JSON on stdout instead of tables"},
      {.name = "timeout-ms", .value = "N",
       .help = "deadline for every wait, in milliseconds: 1..86400000 (24 h; default 10000)"},
  };
  return kFlags;
}

bool Args::has(std::string_view flag) const {
  for (const auto& [name, value] : flags_)
    if (name == flag) return true;
  return false;
}

std::optional<std::string> Args::value(std::string_view flag) const {
  std::optional<std::string> out;
  for (const auto& [name, value] : flags_)
    if (name == flag) out = value;
  return out;
}

std::vector<std::string> Args::values(std::string_view flag) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : flags_)
    if (name == flag) out.push_back(value);
  return out;
}

namespace {

Status bad_value(std::string_view flag, const std::string& value, std::string_view what) {
  return conccl::error(Code::invalid_argument, "--" + std::string(flag) + " '" + value +
                                                   "' is not " + std::string(what));
}

template <typename T, typename ParseFn>
Result<std::optional<T>> typed(const Args& a, std::string_view flag, ParseFn parse,
                               std::string_view what) {
  std::optional<std::string> v = a.value(flag);
  if (!v) return std::optional<T>();
  std::optional<T> x = parse(*v);
  if (!x) return bad_value(flag, *v, what);
  return x;
}

template <typename T>
Result<T> or_default(Result<std::optional<T>> r, T fallback) {
  if (!r.ok()) return r.status();
  return r->value_or(fallback);
}

// Decimal or 0x-hex digits with an optional '-', of any length.
bool looks_like_integer(std::string_view s) {
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  if (hex) s.remove_prefix(2);
  if (s.empty()) return false;
  for (char c : s)
    if (!(hex ? std::isxdigit(static_cast<unsigned char>(c)) : std::isdigit(static_cast<unsigned char>(c))))
      return false;
  return true;
}

const FlagSpec* find_spec(const std::vector<FlagSpec>& specs, std::string_view name) {
  for (const FlagSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

std::string flag_list(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) out += (out.empty() ? "--" : ", --") + std::string(s.name);
  return out;
}

// ", or -b (--min), -e (--max)": the one-letter aliases, for errors; "" when none.
std::string short_list(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs)
    if (s.short_name && !s.value.empty())
      out += (out.empty() ? ", or " : ", ") + std::string("-") + s.short_name + " (--" + std::string(s.name) + ")";
  return out;
}

}  // namespace

Result<std::optional<uint64_t>> Args::get_uint(std::string_view flag) const {
  return typed<uint64_t>(*this, flag, parse_uint, "a non-negative integer (decimal or 0x-hex)");
}
Result<std::optional<int64_t>> Args::get_int(std::string_view flag) const {
  return typed<int64_t>(*this, flag, parse_int, "an integer (decimal or 0x-hex)");
}
Result<std::optional<uint64_t>> Args::get_size(std::string_view flag) const {
  return typed<uint64_t>(*this, flag, parse_size,
                         "a size (bytes, or with a K/M/G/T suffix: 4K, 64M, 1G)");
}
Result<std::optional<double>> Args::get_double(std::string_view flag) const {
  return typed<double>(
      *this, flag,
      [](const std::string& s) -> std::optional<double> {
        double d = 0;
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
        if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
        return d;
      },
      "a number");
}
Result<uint64_t> Args::get_uint(std::string_view flag, uint64_t fallback) const {
  return or_default(get_uint(flag), fallback);
}
Result<int64_t> Args::get_int(std::string_view flag, int64_t fallback) const {
  return or_default(get_int(flag), fallback);
}
Result<uint64_t> Args::get_size(std::string_view flag, uint64_t fallback) const {
  return or_default(get_size(flag), fallback);
}

Result<std::optional<int64_t>> Args::get_int_in_range(std::string_view flag, int64_t lo,
                                                       int64_t hi) const {
  std::optional<std::string> v = value(flag);
  if (!v) return std::optional<int64_t>();
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  const std::string name = "--" + std::string(flag);
  std::optional<int64_t> x = parse_int(*v);
  // A number too large even for 64 bits is out of range, not malformed.
  const bool huge = !x && looks_like_integer(*v);
  if (!x && !huge)
    return conccl::error(Code::invalid_argument,
                         name + " '" + *v + "' is not an integer (give " + range + ", decimal or 0x-hex)");
  if (huge || *x < lo || *x > hi)
    return conccl::error(Code::invalid_argument, name + " " + *v + " is out of range: give " + range);
  return x;
}

Result<int64_t> Args::get_int_in_range(std::string_view flag, int64_t lo, int64_t hi,
                                       int64_t fallback) const {
  return or_default(get_int_in_range(flag, lo, hi), fallback);
}

Status Args::apply_common() {
  if (std::optional<std::string> b = value("backend")) {
    if (*b == "emu") common_.backend = Backend::emu;
    else if (*b == "kfd") common_.backend = Backend::kfd;
    else if (*b == "nv") common_.backend = Backend::nv;
    else
      return conccl::error(Code::invalid_argument,
                           "--backend '" + *b + "' is not one of emu, kfd, nv");
    common_.backend_given = true;
  }
  if (std::optional<std::string> p = value("preset")) {
    if (p->empty()) return conccl::error(Code::invalid_argument, "--preset needs a name");
    common_.preset = *p;
  }
  common_.json = has("json");
  Result<std::optional<int64_t>> t = get_int_in_range("timeout-ms", 1, kMaxTimeoutMs);
  if (!t.ok() && parse_int(value("timeout-ms").value_or("")) == 0)
    return conccl::error(Code::invalid_argument,
                         "--timeout-ms 0 would fail every wait at once (a false hang diagnosis); give 1.." +
                             std::to_string(kMaxTimeoutMs) + " ms");
  if (!t.ok()) return t.status();
  if (t->has_value()) {
    common_.timeout_ms = static_cast<uint64_t>(**t);
    common_.timeout_given = true;
  }
  return Status();
}

Result<Args> Args::parse(std::string_view command, const std::vector<std::string>& argv,
                         const std::vector<FlagSpec>& specs) {
  Args a;
  a.command_ = std::string(command);
  bool flags_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    if (flags_done || w == "-" || w.empty() || w[0] != '-') {
      a.positionals_.push_back(w);
      continue;
    }
    if (w == "--") {
      flags_done = true;
      continue;
    }
    if (w[1] != '-') {
      // -X VALUE or -XVALUE: the flag whose one-letter alias is X.
      const FlagSpec* sh = nullptr;
      for (const FlagSpec& s : specs)
        if (s.short_name && s.short_name == w[1] && !s.value.empty()) sh = &s;
      if (!sh)
        return conccl::error(Code::invalid_argument,
                             "unknown option '" + w + "' (flags are spelled --name" + short_list(specs) +
                                 "; use -- before a file name that starts with '-')");
      const std::string name(sh->name);
      std::string value;
      if (w.size() > 2) {
        value = w.substr(2);
      } else if (i + 1 < argv.size()) {
        value = argv[++i];
      } else {
        return conccl::error(Code::invalid_argument, std::string("-") + sh->short_name + " (--" + name +
                                                         ") needs a value (" + std::string(sh->value) + ")");
      }
      if (!sh->repeatable && a.has(name))
        return conccl::error(Code::invalid_argument,
                             "--" + name + " given more than once (-" + std::string(1, sh->short_name) +
                                 " is the same flag)");
      a.flags_.emplace_back(name, std::move(value));
      continue;
    }
    if (w.size() < 3)
      return conccl::error(Code::invalid_argument,
                           "unknown option '" + w + "' (flags are spelled --name; use -- before "
                           "a file name that starts with '-')");
    const size_t eq = w.find('=');
    const std::string name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagSpec* spec = find_spec(specs, name);
    if (!spec)
      return conccl::error(Code::invalid_argument,
                           "unknown flag --" + name + " (flags: " + flag_list(specs) + ")");
    std::string value;
    // --json=FILE: where the command writes JSON to a file (--json-file),
    // the same as --json FILE.
    if (name == "json" && eq != std::string::npos && find_spec(specs, "json-file")) {
      a.flags_.emplace_back("json-file", w.substr(eq + 1));
      continue;
    }
    if (spec->value.empty()) {
      if (eq != std::string::npos)
        return conccl::error(Code::invalid_argument,
                             "--" + name + " takes no value" +
                                 (name == "json" ? " here (this command prints JSON on stdout with --json)" : ""));
      if (a.has(name)) continue;  // a repeated switch changes nothing
    } else {
      if (eq != std::string::npos) {
        value = w.substr(eq + 1);
      } else if (i + 1 < argv.size()) {
        value = argv[++i];
      } else {
        return conccl::error(Code::invalid_argument,
                             "--" + name + " needs a value (" + std::string(spec->value) + ")");
      }
      if (!spec->repeatable && a.has(name))
        return conccl::error(Code::invalid_argument, "--" + name + " given more than once");
    }
    a.flags_.emplace_back(name, std::move(value));
  }
  CONCCL_RETURN_IF_ERROR(a.apply_common());
  return a;
}

// ---------------------------------------------------------------------------
// Registry

namespace {

std::vector<Command>& registry() {
  static std::vector<Command> r;  // function-local: safe during static init
  return r;
}

}  // namespace

Registration::Registration(Command c) { registry().push_back(std::move(c)); }

std::vector<const Command*> commands() {
  std::vector<const Command*> out;
  for (const Command& c : registry()) out.push_back(&c);
  std::sort(out.begin(), out.end(), [](const Command* a, const Command* b) {
    return a->order != b->order ? a->order < b->order : a->name < b->name;
  });
  return out;
}

const Command* find_command(std::string_view name) {
  for (const Command& c : registry())
    if (c.name == name) return &c;
  return nullptr;
}

namespace {

void print_flags(const std::vector<FlagSpec>& specs, FILE* f) {
  size_t width = 0;
  std::vector<std::string> heads;
  for (const FlagSpec& s : specs) {
    std::string h = "--" + std::string(s.name);
    if (!s.value.empty()) h += " " + std::string(s.value);
    width = std::max(width, h.size());
    heads.push_back(std::move(h));
  }
  for (size_t i = 0; i < specs.size(); ++i)
    std::fprintf(f, "  %-*s  %.*s%s%s\n", static_cast<int>(width), heads[i].c_str(),
                 static_cast<int>(specs[i].help.size()), specs[i].help.data(),
                 specs[i].repeatable ? " (repeatable)" : "",
                 specs[i].short_name && !specs[i].value.empty()
                     ? (std::string(" (short: -") + specs[i].short_name + ")").c_str()
                     : "");
}

std::string command_names() {
  std::string out;
  for (const Command* c : commands()) out += (out.empty() ? "" : ", ") + std::string(c->name);
  return out;
}

}  // namespace

void print_usage(FILE* f) {
  std::fprintf(f,
               "sdma-probe - drive and inspect GPU DMA engines (ConCCL %s)\n"
               "\n"
               "usage: sdma-probe [SHARED FLAGS] COMMAND [FLAGS] [ARGS]\n"
               "       sdma-probe help COMMAND      (or: sdma-probe COMMAND --help)\n"
               "\n"
               "commands:\n",
               CONCCL_VERSION);
  size_t width = 0;
  for (const Command* c : commands()) width = std::max(width, c->name.size());
  for (const Command* c : commands())
    std::fprintf(f, "  %-*.*s  %.*s\n", static_cast<int>(width), static_cast<int>(c->name.size()),
                 c->name.data(), static_cast<int>(c->summary.size()), c->summary.data());
  std::fprintf(f,
               "\nshared flags (every command accepts them; a command that has no use for one "
               "ignores it):\n");
  print_flags(common_flags(), f);
  std::fprintf(f,
               "\nexit codes: 0 ok; 1 verification failed; 2 usage or bad input; 3 deadline "
               "passed;\n            4 engine or device fault; 5 backend not available here\n"
               "\nsee docs/sdma-probe.md\n");
}

void print_command_help(const Command& c, FILE* f) {
  std::fprintf(f, "usage: %.*s\n\n%.*s\n", static_cast<int>(c.usage.size()), c.usage.data(),
               static_cast<int>(c.summary.size()), c.summary.data());
  if (!c.details.empty())
    std::fprintf(f, "\n%.*s%s", static_cast<int>(c.details.size()), c.details.data(),
                 c.details.back() == '\n' ? "" : "\n");
  if (!c.flags.empty()) {
    std::fprintf(f, "\nflags:\n");
    print_flags(c.flags, f);
  }
  std::fprintf(f, "\nshared flags:\n");
  print_flags(common_flags(), f);
}

int fail(const Args& args, Context& ctx, const Status& st) {
  const ExitCode code = exit_code_for(st.code());
  const std::string text = code == ExitCode::usage ? st.message() : st.to_string();
  std::fprintf(ctx.err, "sdma-probe %.*s: %s\n", static_cast<int>(args.command().size()),
               args.command().data(), text.c_str());
  if (code == ExitCode::timeout) end_after_hang(code);
  return to_int(code);
}

void end_after_hang(ExitCode code) {
  // After a deadline a packet may still be running (a 10 GiB copy_window):
  // destroying the device would wait for the emulated engine to finish it,
  // long after the diagnosis. Flush every stream (stdout, stderr, files)
  // and end the process now, without destructors.
  std::fflush(nullptr);
  _exit(to_int(code));
}

int usage_error(const Args& args, Context& ctx, std::string_view message) {
  return fail(args, ctx, conccl::error(Code::invalid_argument, std::string(message)));
}

// ---------------------------------------------------------------------------
// Input

FILE* open_input(const std::string& path, Context& ctx) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) std::fprintf(ctx.err, "%s: cannot open: %s\n", path.c_str(), std::strerror(errno));
  return f;
}

bool read_line(FILE* f, std::string* line) {
  line->clear();
  int c;
  bool any = false;
  while ((c = std::fgetc(f)) != EOF) {
    any = true;
    if (c == '\n') return true;
    line->push_back(static_cast<char>(c));
  }
  return any;
}

int refuse_json(const Args& args, Context& ctx, std::string_view what) {
  if (!args.common().json) return -1;
  return usage_error(args, ctx, "--json: " + std::string(args.command()) + " prints " + std::string(what) +
                                    ", not JSON; drop --json");
}

std::string read_all(FILE* f) {
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

// ---------------------------------------------------------------------------
// Dispatch

namespace {

bool is_help(const std::string& w) { return w == "--help" || w == "-h"; }

int run_main(const std::vector<std::string>& words) {
  Context ctx;
  // Shared flags may come before the command name.
  std::vector<std::string> leading;
  size_t i = 1;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (is_help(w)) {
      print_usage(stdout);
      return to_int(ExitCode::ok);
    }
    if (w == "--version") {
      std::printf("sdma-probe (ConCCL) %s\n", CONCCL_VERSION);
      return to_int(ExitCode::ok);
    }
    if (w.size() < 2 || w[0] != '-') break;
    const std::string name = w.substr(2, w.find('=') - 2);
    const FlagSpec* spec = w.rfind("--", 0) == 0 ? find_spec(common_flags(), name) : nullptr;
    if (!spec) {
      std::fprintf(stderr,
                   "sdma-probe: unknown flag '%s' before the command (only the shared flags "
                   "%s may come first)\nrun 'sdma-probe --help' for the commands\n",
                   w.c_str(), flag_list(common_flags()).c_str());
      return to_int(ExitCode::usage);
    }
    leading.push_back(w);
    if (!spec->value.empty() && w.find('=') == std::string::npos && i + 1 < words.size())
      leading.push_back(words[++i]);
  }
  if (i >= words.size()) {
    print_usage(stderr);
    return to_int(ExitCode::usage);
  }
  const std::string& name = words[i];
  if (name == "help") {
    if (i + 1 >= words.size()) {
      print_usage(stdout);
      return to_int(ExitCode::ok);
    }
    const Command* c = find_command(words[i + 1]);
    if (!c) {
      std::fprintf(stderr, "sdma-probe help: unknown command '%s' (commands: %s)\n",
                   words[i + 1].c_str(), command_names().c_str());
      return to_int(ExitCode::usage);
    }
    print_command_help(*c, stdout);
    return to_int(ExitCode::ok);
  }
  const Command* cmd = find_command(name);
  if (!cmd) {
    std::fprintf(stderr, "sdma-probe: unknown command '%s' (commands: %s)\n", name.c_str(),
                 command_names().c_str());
    return to_int(ExitCode::usage);
  }

  std::vector<std::string> rest = leading;
  for (size_t j = i + 1; j < words.size(); ++j) {
    if (words[j] == "--") {
      rest.insert(rest.end(), words.begin() + static_cast<std::ptrdiff_t>(j), words.end());
      break;
    }
    if (is_help(words[j])) {
      print_command_help(*cmd, stdout);
      return to_int(ExitCode::ok);
    }
    rest.push_back(words[j]);
  }
  std::vector<FlagSpec> specs = cmd->flags;
  specs.insert(specs.end(), common_flags().begin(), common_flags().end());
  Result<Args> args = Args::parse(cmd->name, rest, specs);
  if (!args.ok()) {
    std::fprintf(stderr, "sdma-probe %s: %s\nrun 'sdma-probe help %s' for its usage\n",
                 name.c_str(), args.status().message().c_str(), name.c_str());
    return to_int(ExitCode::usage);
  }
  return cmd->run(*args, ctx);
}

}  // namespace

std::vector<std::string>& original_words_storage() {
  static std::vector<std::string> w;
  return w;
}
const std::vector<std::string>& original_words() { return original_words_storage(); }

int main_entry(int argc, char** argv) {
  std::vector<std::string> words(argv, argv + argc);
  original_words_storage() = words;
  try {
    const int rc = run_main(words);
    // Every write to stdout (the table, --json) is checked here: a failed
    // flush, or a write that failed earlier (the stream's error flag; a
    // full buffer is written out while the command prints).
    const int flushed = std::fflush(stdout);
    const int flush_errno = errno;
    if (flushed != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "sdma-probe: writing the output (stdout) failed: %s\n",
                   flushed != 0 ? std::strerror(flush_errno)
                                : "an earlier write failed (a full disk or device, or a closed pipe?)");
      return rc == 0 ? to_int(ExitCode::fault) : rc;
    }
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sdma-probe: internal error: %s (please report)\n", e.what());
    return to_int(ExitCode::fault);
  }
}

}  // namespace probe
