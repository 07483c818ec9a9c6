// tools/sdma-probe/selftest_types.cpp
#include "selftest/selftest_types.hpp"

namespace probe::selftest {

const char* cell_name(Cell c) {
  switch (c) {
    case Cell::not_run: return "not run";
    case Cell::ok: return "ok";
    case Cell::skipped: return "skipped";
    case Cell::failed: return "FAIL";
    case Cell::hung: return "HANG";
    case Cell::faulted: return "FAULT";
  }
  return "?";
}

const char* check_name(Check c) {
  switch (c) {
    case Check::copy: return "copy";
    case Check::fill: return "fill";
    case Check::signal: return "signal";
    case Check::wake: return "wake";
    case Check::poll: return "poll";
    case Check::atomic: return "atomic";
    case Check::timestamp: return "timestamp";
  }
  return "?";
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "fail";
    case Verdict::slow: return "slow";
    case Verdict::hang: return "hang";
    case Verdict::fault: return "fault";
  }
  return "?";
}

void EngineReport::record(Check c, const Outcome& o) {
  cell(c) = o.cell;
  if (o.cell != Cell::ok) findings.push_back({check_name(c), o.cell, o.message, o.hang_kind});
}

Verdict EngineReport::verdict() const {
  bool fault = false, fail = false;
  for (const Finding& f : findings) {
    if (f.cell == Cell::hung) return Verdict::hang;
    fault |= f.cell == Cell::faulted;
    fail |= f.cell == Cell::failed;
  }
  if (fault) return Verdict::fault;
  if (fail) return Verdict::fail;
  return slow ? Verdict::slow : Verdict::pass;
}

bool EngineReport::stopped() const {
  for (const Finding& f : findings)
    if (f.cell == Cell::hung || f.cell == Cell::faulted) return true;
  return false;
}

}  // namespace probe::selftest
