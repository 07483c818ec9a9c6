// tests/backends/kfd/fixture_topologies.hpp - sysfs topologies made from the
// recorded ones in fixtures/kfd (KFD_FIXTURES) by changing what a test needs.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kfdfixture {

// The MI300X (SPX) topology copied to `root`, with GPU 0's link to the CPU
// flagged NO_ATOMICS_64 (io_link flags bit 3: KFD's mark for a CPU link
// without PCIe AtomicOps, so SDMA ATOMICs to host memory are not atomic).
inline ::testing::AssertionResult mi300x_without_host_atomics(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::copy(std::string(KFD_FIXTURES) + "/mi300x_spx/topology", root, fs::copy_options::recursive, ec);
  if (ec) return ::testing::AssertionFailure() << "copying the fixture to " << root << ": " << ec.message();
  const fs::path link = root / "nodes" / "1" / "io_links" / "0" / "properties";  // gpu 0 -> CPU node 0
  std::ostringstream text;
  {
    std::ifstream in(link);
    if (!in) return ::testing::AssertionFailure() << "cannot read " << link;
    text << in.rdbuf();
  }
  std::string s = text.str();
  const size_t at = s.find("flags 1");
  if (at == std::string::npos) return ::testing::AssertionFailure() << link << " has no \"flags 1\"";
  s.replace(at, 7, "flags 9");  // enabled | NO_ATOMICS_64
  std::ofstream out(link, std::ios::trunc);
  out << s;
  if (!out) return ::testing::AssertionFailure() << "cannot write " << link;
  return ::testing::AssertionSuccess();
}

}  // namespace kfdfixture
