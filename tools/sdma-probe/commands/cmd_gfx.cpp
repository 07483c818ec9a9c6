// tools/sdma-probe/cmd_gfx.cpp - `sdma-probe gfx`: gfx target -> SDMA generation.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "packets/generation.hpp"

namespace probe {
namespace {

namespace sdma = conccl::sdma;

// A positional: "gfx942", "942" or KFD's gfx_target_version ("90402").
std::optional<sdma::GfxTarget> lookup(const std::string& s) {
  if (s.size() >= 5 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (std::optional<uint64_t> v = parse_uint(s); v && *v <= 0xFFFFFFFFu)
      return sdma::gfx_target_version_to_target(static_cast<uint32_t>(*v));
    return std::nullopt;
  }
  return sdma::gfx_to_target(s);
}

int run_gfx(const Args& args, Context& ctx) {
  std::vector<sdma::GfxTarget> rows;
  if (args.positionals().empty()) {
    rows.assign(sdma::gfx_targets().begin(), sdma::gfx_targets().end());
  } else {
    std::string unknown;
    for (const std::string& s : args.positionals()) {
      if (std::optional<sdma::GfxTarget> t = lookup(s)) rows.push_back(*t);
      else unknown += (unknown.empty() ? "'" : ", '") + s + "'";
    }
    if (!unknown.empty())
      return usage_error(args, ctx, "unknown gfx target " + unknown +
                                        " (run `sdma-probe gfx` for the table)");
  }

  if (args.common().json) {
    std::fprintf(ctx.out, "{\"targets\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      const sdma::GfxTarget& t = rows[i];
      std::fprintf(ctx.out,
                   "%s\n  {\"gfx\": %s, \"generation\": %s, \"sdma_ip\": %s, \"products\": %s, "
                   "\"source\": %s}",
                   i ? "," : "", json_string(t.gfx).c_str(),
                   json_string(sdma::gen_name(t.gen)).c_str(), json_string(t.sdma_ip).c_str(),
                   json_string(t.products).c_str(), json_string(t.source).c_str());
    }
    std::fprintf(ctx.out, "\n]}\n");
    return to_int(ExitCode::ok);
  }

  const char* head[5] = {"gfx", "gen", "SDMA IP", "products", "source"};
  size_t w[4] = {3, 3, 7, 8};
  for (const sdma::GfxTarget& t : rows) {
    w[0] = std::max(w[0], t.gfx.size());
    w[1] = std::max(w[1], sdma::gen_name(t.gen).size());
    w[2] = std::max(w[2], t.sdma_ip.size());
    w[3] = std::max(w[3], t.products.size());
  }
  auto line = [&](std::string_view a, std::string_view b, std::string_view c, std::string_view d,
                  std::string_view e) {
    std::fprintf(ctx.out, "%-*.*s  %-*.*s  %-*.*s  %-*.*s  %.*s\n", int(w[0]), int(a.size()),
                 a.data(), int(w[1]), int(b.size()), b.data(), int(w[2]), int(c.size()), c.data(),
                 int(w[3]), int(d.size()), d.data(), int(e.size()), e.data());
  };
  line(head[0], head[1], head[2], head[3], head[4]);
  for (const sdma::GfxTarget& t : rows) line(t.gfx, sdma::gen_name(t.gen), t.sdma_ip, t.products, t.source);
  return to_int(ExitCode::ok);
}

const Registration gfx_reg({
    .name = "gfx",
    .summary = "print which SDMA packet generation each gfx target uses, with sources",
    .usage = "sdma-probe gfx [--json] [TARGET...]",
    .details =
        "Prints the gfx target -> SDMA generation table (the generation is what --gen\n"
        "takes). TARGETs narrow it down: gfx942, 942, or KFD's gfx_target_version\n"
        "(90402). --json prints {\"targets\": [{\"gfx\", \"generation\", \"sdma_ip\",\n"
        "\"products\", \"source\"}, ...]}.\n",
    .run = run_gfx,
    .order = 30,
});

}  // namespace
}  // namespace probe
