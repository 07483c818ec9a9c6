// tools/sdma-probe/gen_flags.cpp
#include "gen_flags.hpp"

#include <string>

namespace probe {

using conccl::Code;
using conccl::sdma::Gen;

std::vector<FlagSpec> gen_flag_specs() {
  return {
      {.name = "gen", .value = "GEN",
       .help = "SDMA packet generation: 4, 4.4, 4.4.2, 5, 5.2, 6 or 7 (aliases such as 4.4.5, 6.0)"},
      {.name = "gfx", .value = "TARGET",
       .help = "take the generation from a gfx target instead (gfx942; see `sdma-probe gfx`)"},
  };
}

namespace {

std::string gfx_list() {
  std::string out;
  for (const conccl::sdma::GfxTarget& t : conccl::sdma::gfx_targets())
    out += (out.empty() ? "" : ", ") + std::string(t.gfx);
  return out;
}

}  // namespace

conccl::Result<Gen> gen_from_args(const Args& args, std::optional<Gen> fallback) {
  const std::optional<std::string> gen_s = args.value("gen"), gfx_s = args.value("gfx");
  std::optional<Gen> by_gen, by_gfx;
  if (gen_s) {
    by_gen = conccl::sdma::parse_gen(*gen_s);
    if (!by_gen)
      return conccl::error(Code::invalid_argument,
                           "unknown SDMA generation '" + *gen_s +
                               "' for --gen; generations: " + conccl::sdma::gen_list());
  }
  if (gfx_s) {
    std::optional<conccl::sdma::GfxTarget> t = conccl::sdma::gfx_to_target(*gfx_s);
    if (!t)
      return conccl::error(Code::invalid_argument,
                           "unknown gfx target '" + *gfx_s + "' for --gfx (known: " + gfx_list() +
                               "); or give --gen: " + conccl::sdma::gen_list());
    by_gfx = t->gen;
  }
  if (by_gen && by_gfx && *by_gen != *by_gfx)
    return conccl::error(Code::invalid_argument,
                         "--gen " + *gen_s + " and --gfx " + *gfx_s + " (SDMA " +
                             std::string(conccl::sdma::gen_name(*by_gfx)) +
                             ") disagree; give one of them");
  if (by_gen) return *by_gen;
  if (by_gfx) return *by_gfx;
  if (fallback) return *fallback;
  return conccl::error(Code::invalid_argument,
                       "--gen is required; generations: " + conccl::sdma::gen_list() +
                           " (or --gfx TARGET, e.g. --gfx gfx942; `sdma-probe gfx` lists them)");
}

}  // namespace probe
