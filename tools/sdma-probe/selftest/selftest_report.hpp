// tools/sdma-probe/selftest_report.hpp - `sdma-probe selftest`'s judgement
// and output: which engines run far below their peers, the matrix table, the
// JSON document, and the exit code.
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"
#include "selftest/selftest_types.hpp"

namespace probe::selftest {

// Engines are compared like with like: the same GPU, engine kind and weight
// (NVIDIA: PCE count; an LCE with 12 PCEs is not held to one with 2). An
// engine whose bandwidth is below `ratio` x the median of the other engines
// of its group (at least 2 measured engines) is marked slow. Returns the indices
// of the engines marked.
std::vector<size_t> mark_slow(std::vector<EngineReport>& engines, double ratio);

// The header of the report: what ran, on what.
struct RunInfo {
  std::string backend, preset;
  uint64_t bandwidth_bytes = 0;
  int reps = 0;
  double slow_ratio = 0.5;
  uint64_t timeout_ms = 0;
  bool all_peers = false;
  std::string injected;             // "stall on 0:2", or empty
  std::vector<std::string> notes;   // topology and memory notes
};

// The matrix (rows GPU x engine), then one paragraph per engine that did not
// pass (every finding, hang diagnoses in full), then a summary line.
std::string report_table(const RunInfo& info, const std::vector<EngineReport>& engines);
// {"backend", "preset", "bytes", "reps", "slow_ratio", "timeout_ms", "all_peers", "injected",
//  "notes": [..], "engines": [{"gpu", "engine", "kind", "weight", "checks": {"copy": "ok", ...},
//  "peers": [{"peer", "result"}], "peers_linked", "gbps", "group_median_gbps", "placement",
//  "placement_note", "verdict", "findings": [{"check", "result", "message", "hang_kind"}]}],
//  "failed": [{"gpu", "engine", "check", "message"}], "hung": [{"gpu", "engine", "check",
//  "hang_kind", "diagnosis"}], "faulted": [...as failed], "slow": [{"gpu", "engine", "kind",
//  "weight", "gbps", "group_median_gbps", "group_size"}], "summary": {"engines", "pass", "fail",
//  "slow", "hang", "fault"}, "verdict", "exit_code"}
std::string report_json(const RunInfo& info, const std::vector<EngineReport>& engines);

// 3 when any engine hung, else 4 when any faulted, else 1 when any failed a
// check or ran slow, else 0.
ExitCode selftest_exit_code(const std::vector<EngineReport>& engines);

}  // namespace probe::selftest
