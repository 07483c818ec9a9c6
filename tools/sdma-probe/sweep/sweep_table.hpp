// tools/sdma-probe/sweep_table.hpp - the collective sweeps' table, laid out
// like nccl-tests: a banner of '#' lines, a '#' header, one whitespace-
// separated row per size, and a closing summary with the average bus
// bandwidth. Format: docs/sdma-probe.md.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sweep/sweep_stats.hpp"

namespace probe {

// What the banner says about the run.
struct SweepSetup {
  std::string op;         // "allgather"
  std::string backend;    // "emu", "kfd", "nv"
  bool emulated = false;
  std::string preset;     // empty: none
  int ranks = 0, gpus = 0;
  bool loopback = false;
  std::string queues;     // --queues
  int engines_per_gpu = 0;
  std::string variant;    // asked: "auto" or a name
  bool prelaunch = false;
  int procs = 0;          // --procs N (0: every rank in this process)
  bool windows = false;   // --procs: calls through windows (not --no-windows)
  int64_t iters = 0;      // 0: by size
  int64_t warmup = 0;
  uint64_t min = 0, max = 0, step_factor = 2;
  int root = 0, peer = 1;
  bool has_root = false, has_peer = false;
  // Reductions (reducescatter, allreduce, reduce): the table gains nccl-tests'
  // redop and root columns, the banner the operator, type and ordering.
  bool reduction = false;
  std::string redop;      // "sum"
  std::string dtype;      // "float"
  std::string ordering;       // how calls are ordered: "hoststream", "cuda-stream" or "host" (JSON)
  std::string ordering_note;  // the same for the banner, in words
  uint64_t staging = 0;   // Communicator::Options::reduce_staging_bytes
};

// One size: out of place, and in place where the op has that form.
struct SweepRow {
  uint64_t size = 0;
  uint64_t count = 0;     // elements of `type`
  std::string type = "uint8";
  std::string variant;    // the one the plan chose
  int engines = 0;        // (GPU, engine) pairs the plan uses
  uint64_t iters = 0;
  TimeStats time;         // microseconds
  double algbw = 0, busbw = 0;  // GB/s
  uint64_t wrong = 0;     // destination bytes that differ (reductions: elements)
  // Reductions: nccl-tests' redop and root columns (root -1 where the op has
  // none); empty redop: a copy collective, whose table has neither.
  std::string redop;
  int root = -1;
  uint64_t pieces = 0;    // rounds through the reduction staging (reductions)
  bool in_place = false;  // measured in place too (else the in-place columns print n/a)
  TimeStats ip_time;
  double ip_algbw = 0, ip_busbw = 0;
  uint64_t ip_wrong = 0;
  std::string ip_variant;
  // --procs: bootstrap messages a rank sent and received inside the timed
  // calls, per call (the most of any rank; -1: one process, not counted).
  double messages_per_call = -1;
  double ip_messages_per_call = -1;  // the in-place form's
};

void print_banner(FILE* f, const SweepSetup& s);
// `reduction`: with the redop and root columns after type.
void print_header(FILE* f, bool reduction = false);
void print_row(FILE* f, const SweepRow& r);
// "# Out of bounds values : N OK|FAILED" (wrong bytes or elements, both forms),
// --procs: "# Bootstrap msgs/call  : X (bootstrap_messages_per_call: ...)"
// (messages_per_call), and "# Avg bus bandwidth    : X" (the mean of every
// busbw measured, both forms).
void print_summary(FILE* f, const std::vector<SweepRow>& rows);
// --procs: the most bootstrap messages per timed call of any row and form
// (each row's: the most of any rank); -1 in one process.
double messages_per_call(const std::vector<SweepRow>& rows);
// Sizes from min to max, each `factor` times the last (factor >= 2).
std::vector<uint64_t> sweep_sizes(uint64_t min, uint64_t max, uint64_t factor);

}  // namespace probe
