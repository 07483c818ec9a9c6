// tools/sdma-probe/selftest_types.hpp - what `sdma-probe selftest` records
// about each engine: one cell per check, peers, bandwidth, placement, and the
// findings (failures, hangs with their diagnosis, faults, skips with reasons).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace probe::selftest {

// The result of one check on one engine.
enum class Cell : uint8_t {
  not_run,  // an earlier check of this engine hung or faulted
  ok,
  skipped,  // the engine cannot do it (caps), with the reason in a finding
  failed,   // wrong data or an error
  hung,     // a wait passed its deadline (finding carries the diagnosis)
  faulted,  // the engine reported a fault
};
const char* cell_name(Cell c);

// The checks, in matrix order.
enum class Check : uint8_t { copy, fill, signal, wake, poll, atomic, timestamp };
inline constexpr size_t kCheckCount = 7;
const char* check_name(Check c);

// What one check (or one piece of it) came to.
struct Outcome {
  Cell cell = Cell::ok;
  std::string message;    // why, when not ok (hang: the diagnosis text)
  std::string hang_kind;  // hung: classify_hang's verdict ("never fetched", ...)
};

// Something worth naming in the report.
struct Finding {
  std::string check;  // "copy", "peer 3", "bandwidth", "placement", ...
  Cell cell = Cell::failed;
  std::string message;
  std::string hang_kind;
};

struct PeerResult {
  int peer = 0;
  Cell cell = Cell::not_run;
};

enum class Verdict : uint8_t { pass, fail, slow, hang, fault };
const char* verdict_name(Verdict v);

struct EngineReport {
  int gpu = 0;
  int engine = 0;
  std::string kind;     // engine_kind_name
  double weight = 1.0;  // EngineInfo::weight (NVIDIA: PCE count)
  std::array<Cell, kCheckCount> cells{};  // all not_run at first
  std::vector<PeerResult> peers;
  size_t peers_linked = 0;  // links of this GPU (peers tested may be a sample)
  double gbps = 0;          // best bandwidth copy; 0 when not measured
  bool slow = false;
  double group_median_gbps = 0;  // median of the other engines of its group (what it was compared with)
  size_t group_size = 0;         // how many engines were compared (itself included)
  std::string placement;         // "ok", "WRONG", "not checkable"
  std::string placement_note;    // how it was checked, or why it cannot be
  std::vector<Finding> findings;

  Cell& cell(Check c) { return cells[static_cast<size_t>(c)]; }
  Cell cell(Check c) const { return cells[static_cast<size_t>(c)]; }
  // Records an outcome as a check's cell (and a finding when not ok).
  void record(Check c, const Outcome& o);
  // Worst state: hang, then fault, then fail (wrong data, wrong placement,
  // failed peer), then slow, else pass.
  Verdict verdict() const;
  // True when a hang or fault ended this engine's checks early.
  bool stopped() const;
};

}  // namespace probe::selftest
