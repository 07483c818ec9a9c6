// tools/sdma-probe/sweep_plot.hpp - `--plot FILE.png`: bus bandwidth against
// size, one line per variant the sweep ran (and in place, where measured),
// drawn by gnuplot (Debian: gnuplot-nox), which must be on the PATH.
#pragma once

#include <string>
#include <vector>

#include "conccl/status.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {

// Writes the PNG; unavailable (with the package to install) without gnuplot.
conccl::Status plot_sweep(const std::string& png, const std::string& title, const std::vector<SweepRow>& rows);

}  // namespace probe
