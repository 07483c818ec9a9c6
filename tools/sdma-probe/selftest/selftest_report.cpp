// tools/sdma-probe/selftest_report.cpp
#include "selftest/selftest_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace probe::selftest {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string peers_cell(const EngineReport& e) {
  if (e.peers.empty()) return e.peers_linked ? "not run" : "-";
  size_t ok = 0;
  for (const PeerResult& p : e.peers) ok += p.cell == Cell::ok;
  std::string s = std::to_string(ok) + "/" + std::to_string(e.peers.size());
  if (e.peers.size() < e.peers_linked) s += " of " + std::to_string(e.peers_linked);
  return s;
}

std::string gbps_cell(const EngineReport& e) {
  if (e.gbps <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", e.gbps);
  return buf;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out = pad;
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += pad;
  }
  return out;
}

size_t count(const std::vector<EngineReport>& engines, Verdict v) {
  size_t n = 0;
  for (const EngineReport& e : engines) n += e.verdict() == v;
  return n;
}

}  // namespace

std::vector<size_t> mark_slow(std::vector<EngineReport>& engines, double ratio) {
  using Key = std::tuple<int, std::string, double>;
  std::map<Key, std::vector<size_t>> groups;
  for (size_t i = 0; i < engines.size(); ++i)
    if (engines[i].gbps > 0) groups[{engines[i].gpu, engines[i].kind, engines[i].weight}].push_back(i);
  std::vector<size_t> marked;
  for (const auto& [key, members] : groups) {
    for (size_t i : members) {
      // Against the median of the *other* engines of its group: one that
      // counted itself would drag its own reference down, and in a group of
      // two (Hopper's LCE2 and LCE3) a slow engine against a peer slowed by
      // a loaded host then passed (median of 1.25 and 0.21 GB/s: 0.73).
      std::vector<double> others;
      for (size_t j : members)
        if (j != i) others.push_back(engines[j].gbps);
      EngineReport& e = engines[i];
      e.group_median_gbps = others.empty() ? e.gbps : median(others);
      e.group_size = members.size();
      e.slow = !others.empty() && e.gbps < ratio * e.group_median_gbps;
      if (e.slow) marked.push_back(i);
    }
  }
  return marked;
}

ExitCode selftest_exit_code(const std::vector<EngineReport>& engines) {
  if (count(engines, Verdict::hang)) return ExitCode::timeout;
  if (count(engines, Verdict::fault)) return ExitCode::fault;
  if (count(engines, Verdict::fail) || count(engines, Verdict::slow)) return ExitCode::verify_failed;
  return ExitCode::ok;
}

std::string report_table(const RunInfo& info, const std::vector<EngineReport>& engines) {
  std::string out = "selftest: backend " + info.backend + (info.preset.empty() ? "" : ", preset " + info.preset) +
                    ", " + std::to_string(engines.size()) + " engines, bandwidth copy " +
                    format_size(info.bandwidth_bytes) + " x " + std::to_string(info.reps) + ", peers " +
                    (info.all_peers ? "all" : "sampled (--all-peers for all)") + "\n";
  if (info.backend == "emu") out += "note: emulated: bandwidths are the emulator's, not hardware's\n";
  if (!info.injected.empty()) out += "note: injected fault: " + info.injected + "\n";
  for (const std::string& n : info.notes) out += "note: " + n + "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-4s %-4s %-5s %-7s %-7s %-7s %-7s %-7s %-7s %-9s %-11s %9s %-14s %s\n",
                "gpu", "eng", "kind", "copy", "fill", "signal", "wake", "poll", "atomic", "timestamp", "peers",
                "GB/s", "placement", "verdict");
  out += line;
  for (const EngineReport& e : engines) {
    auto c = [&](Check k) { return cell_name(e.cell(k)); };
    std::snprintf(line, sizeof line, "%-4d %-4d %-5s %-7s %-7s %-7s %-7s %-7s %-7s %-9s %-11s %9s %-14s %s\n", e.gpu,
                  e.engine, e.kind.c_str(), c(Check::copy), c(Check::fill), c(Check::signal), c(Check::wake),
                  c(Check::poll), c(Check::atomic), c(Check::timestamp), peers_cell(e).c_str(), gbps_cell(e).c_str(),
                  e.placement.c_str(), verdict_name(e.verdict()));
    out += line;
  }
  for (const EngineReport& e : engines) {
    const Verdict v = e.verdict();
    std::string head = "gpu " + std::to_string(e.gpu) + " engine " + std::to_string(e.engine) + ": ";
    if (v == Verdict::slow) {
      char buf[200];
      const size_t peers = e.group_size > 0 ? e.group_size - 1 : 0;
      std::snprintf(buf, sizeof buf, "%.2f GB/s is below %.0f%% of the median %.2f GB/s of its %zu peer%s (%s engines "
                    "of weight %g on this GPU)\n", e.gbps, info.slow_ratio * 100, e.group_median_gbps, peers,
                    peers == 1 ? "" : "s", e.kind.c_str(), e.weight);
      out += "\n" + head + "SLOW: " + buf;
    }
    for (const Finding& f : e.findings) {
      if (f.cell == Cell::skipped) continue;
      out += "\n" + head + f.check + ": " + cell_name(f.cell) + (f.hang_kind.empty() ? "" : " (" + f.hang_kind + ")") +
             "\n" + indent(f.message, "  ") + "\n";
    }
  }
  std::vector<std::string> skips;
  for (const EngineReport& e : engines)
    for (const Finding& f : e.findings)
      if (f.cell == Cell::skipped && std::find(skips.begin(), skips.end(), f.check + ": " + f.message) == skips.end())
        skips.push_back(f.check + ": " + f.message);
  for (const std::string& s : skips) out += "skipped " + s + "\n";
  out += "selftest: " + std::to_string(engines.size()) + " engines: " + std::to_string(count(engines, Verdict::pass)) +
         " pass, " + std::to_string(count(engines, Verdict::fail)) + " fail, " +
         std::to_string(count(engines, Verdict::slow)) + " slow, " + std::to_string(count(engines, Verdict::hang)) +
         " hang, " + std::to_string(count(engines, Verdict::fault)) + " fault\n";
  return out;
}

std::string report_json(const RunInfo& info, const std::vector<EngineReport>& engines) {
  auto num = [](double v, int d) { return json_number(v, d); };
  std::string o = "{\"backend\": " + json_string(info.backend) + ", \"preset\": " + json_string(info.preset) +
                  ", \"bytes\": " + std::to_string(info.bandwidth_bytes) + ", \"reps\": " + std::to_string(info.reps) +
                  ", \"slow_ratio\": " + num(info.slow_ratio, 3) + ", \"timeout_ms\": " +
                  std::to_string(info.timeout_ms) + ", \"all_peers\": " + (info.all_peers ? "true" : "false") +
                  ", \"injected\": " + json_string(info.injected) + ",\n \"notes\": [";
  for (size_t i = 0; i < info.notes.size(); ++i) o += (i ? ", " : "") + json_string(info.notes[i]);
  o += "],\n \"engines\": [";
  std::string failed, hung, faulted, slow;
  auto add = [](std::string& list, const std::string& item) { list += (list.empty() ? "\n  " : ",\n  ") + item; };
  for (size_t i = 0; i < engines.size(); ++i) {
    const EngineReport& e = engines[i];
    const std::string id = "\"gpu\": " + std::to_string(e.gpu) + ", \"engine\": " + std::to_string(e.engine);
    o += std::string(i ? "," : "") + "\n  {" + id + ", \"kind\": " + json_string(e.kind) +
         ", \"weight\": " + num(e.weight, 2) + ", \"checks\": {";
    for (size_t k = 0; k < kCheckCount; ++k)
      o += std::string(k ? ", " : "") + json_string(check_name(static_cast<Check>(k))) + ": " +
           json_string(cell_name(e.cells[k]));
    o += "}, \"peers\": [";
    for (size_t p = 0; p < e.peers.size(); ++p)
      o += std::string(p ? ", " : "") + "{\"peer\": " + std::to_string(e.peers[p].peer) +
           ", \"result\": " + json_string(cell_name(e.peers[p].cell)) + "}";
    o += "], \"peers_linked\": " + std::to_string(e.peers_linked) + ", \"gbps\": " + num(e.gbps, 3) +
         ", \"group_median_gbps\": " + num(e.group_median_gbps, 3) + ", \"placement\": " + json_string(e.placement) +
         ", \"placement_note\": " + json_string(e.placement_note) + ", \"verdict\": " +
         json_string(verdict_name(e.verdict())) + ", \"findings\": [";
    for (size_t f = 0; f < e.findings.size(); ++f) {
      const Finding& x = e.findings[f];
      o += std::string(f ? ", " : "") + "{\"check\": " + json_string(x.check) + ", \"result\": " +
           json_string(cell_name(x.cell)) + ", \"message\": " + json_string(x.message) +
           ", \"hang_kind\": " + json_string(x.hang_kind) + "}";
      const std::string item = "{" + id + ", \"check\": " + json_string(x.check);
      if (x.cell == Cell::failed) add(failed, item + ", \"message\": " + json_string(x.message) + "}");
      if (x.cell == Cell::faulted) add(faulted, item + ", \"message\": " + json_string(x.message) + "}");
      if (x.cell == Cell::hung)
        add(hung, item + ", \"hang_kind\": " + json_string(x.hang_kind) + ", \"diagnosis\": " + json_string(x.message) +
                      "}");
    }
    o += "]}";
    if (e.slow)
      add(slow, "{" + id + ", \"kind\": " + json_string(e.kind) + ", \"weight\": " + num(e.weight, 2) +
                    ", \"gbps\": " + num(e.gbps, 3) + ", \"group_median_gbps\": " + num(e.group_median_gbps, 3) +
                    ", \"group_size\": " + std::to_string(e.group_size) + "}");
  }
  const ExitCode rc = selftest_exit_code(engines);
  o += "],\n \"failed\": [" + failed + "],\n \"hung\": [" + hung + "],\n \"faulted\": [" + faulted +
       "],\n \"slow\": [" + slow + "],\n \"summary\": {\"engines\": " + std::to_string(engines.size()) +
       ", \"pass\": " + std::to_string(count(engines, Verdict::pass)) +
       ", \"fail\": " + std::to_string(count(engines, Verdict::fail)) +
       ", \"slow\": " + std::to_string(count(engines, Verdict::slow)) +
       ", \"hang\": " + std::to_string(count(engines, Verdict::hang)) +
       ", \"fault\": " + std::to_string(count(engines, Verdict::fault)) + "},\n \"verdict\": " +
       json_string(rc == ExitCode::ok ? "pass" : "fail") + ", \"exit_code\": " + std::to_string(to_int(rc)) + "}\n";
  return o;
}

}  // namespace probe::selftest
