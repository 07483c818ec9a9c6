// tools/sdma-probe/gen_flags.hpp - choosing an SDMA packet generation on the
// command line: --gen 4.4.2 or --gfx gfx942.
#pragma once

#include <optional>
#include <vector>

#include "cli.hpp"
#include "packets/generation.hpp"

namespace probe {

// The --gen and --gfx flag specs, for a command's flag list.
std::vector<FlagSpec> gen_flag_specs();

// The generation the flags select. With neither flag: `fallback`, or a usage
// error that lists the generations when there is no fallback. Unknown names,
// and --gen/--gfx that disagree, are usage errors that list what is accepted.
conccl::Result<conccl::sdma::Gen> gen_from_args(
    const Args& args, std::optional<conccl::sdma::Gen> fallback = std::nullopt);

}  // namespace probe
