// tests/fuzz/fuzz_args.cpp - libFuzzer: any argument vector (NUL-separated
// words) through sdma-probe's parser and its typed getters, with the shared
// flags and a set of value flags like the commands' own. Errors are Status
// values; nothing may crash, and a range-checked integer is in its range.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/sdma-probe/cli.hpp"

using namespace probe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> argv(1);
  for (size_t i = 0; i < size && argv.size() < 32; ++i) {
    if (data[i] == 0) argv.emplace_back();
    else argv.back() += static_cast<char>(data[i]);
  }
  static const std::vector<FlagSpec> specs = [] {
    std::vector<FlagSpec> f = common_flags();
    for (const char* v : {"gpu", "engine", "ranks", "root", "min", "max", "iters", "ratio", "variant"})
      f.push_back({.name = v, .value = "X", .help = ""});
    f.push_back({.name = "prelaunch", .help = ""});
    return f;
  }();
  conccl::Result<Args> a = Args::parse("fuzz", argv, specs);
  if (!a.ok()) return 0;
  (void)a->get_size("min");
  (void)a->get_double("ratio");
  (void)a->get_int("root", 0);
  (void)a->get_uint("iters", 1);
  conccl::Result<int64_t> r = a->get_int_in_range("ranks", 1, 64, 2);
  if (r.ok() && (*r < 1 || *r > 64)) std::abort();
  conccl::Result<std::optional<int64_t>> g = a->get_int_in_range("gpu", 0, 63);
  if (g.ok() && g->has_value() && (**g < 0 || **g > 63)) std::abort();
  return 0;
}
