// tools/sdma-probe/sweep_plot.cpp - see sweep_plot.hpp.
#include "sweep/sweep_plot.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

namespace probe {

namespace {

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

// gnuplot's string quoting: single quotes, doubled inside.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

conccl::Status plot_sweep(const std::string& png, const std::string& title, const std::vector<SweepRow>& rows) {
  using conccl::Code;
  if (rows.empty()) return conccl::error(Code::invalid_argument, "--plot: no sizes finished, nothing to plot");
  if (!have_gnuplot())
    return conccl::error(Code::unavailable,
                         "--plot needs gnuplot on the PATH (Debian: apt-get install gnuplot-nox); the sweep itself ran");
  // One data block per series (variant, and its in-place run), as inline data.
  std::map<std::string, std::vector<std::pair<uint64_t, double>>> series;
  for (const SweepRow& r : rows) {
    series[r.variant].push_back({r.size, r.busbw});
    if (r.in_place) series[r.ip_variant + " (in place)"].push_back({r.size, r.ip_busbw});
  }
  FILE* gp = popen("gnuplot", "w");
  if (!gp) return conccl::error(Code::unavailable, "--plot: cannot start gnuplot");
  std::fprintf(gp, "set terminal png size 900,560\nset output %s\n", quoted(png).c_str());
  std::fprintf(gp, "set title %s noenhanced\nset logscale x 2\nset format x '%%.0b%%B'\n", quoted(title).c_str());
  std::fprintf(gp, "set xlabel 'size (bytes)'\nset ylabel 'bus bandwidth (GB/s)'\nset key top left noenhanced\nset grid\n");
  std::string cmd = "plot ";
  for (auto it = series.begin(); it != series.end(); ++it)
    cmd += std::string(it == series.begin() ? "" : ", ") + "'-' using 1:2 with linespoints title " + quoted(it->first);
  std::fprintf(gp, "%s\n", cmd.c_str());
  for (const auto& [name, points] : series) {
    for (const auto& [size, bw] : points) std::fprintf(gp, "%llu %.6f\n", static_cast<unsigned long long>(size), bw);
    std::fprintf(gp, "e\n");
  }
  const int rc = pclose(gp);
  if (rc != 0 || access(png.c_str(), R_OK) != 0)
    return conccl::error(Code::invalid_argument, "--plot: gnuplot could not write " + png + " (exit status " +
                                                     std::to_string(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1) + ")");
  return conccl::Status();
}

}  // namespace probe
