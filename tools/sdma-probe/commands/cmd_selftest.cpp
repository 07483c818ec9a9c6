// tools/sdma-probe/cmd_selftest.cpp - `sdma-probe selftest`: the bring-up
// self-test: every check on every engine of every GPU (selftest_engine), one
// matrix, and the engines that fail, hang or run far below their peers.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "conccl/emu.hpp"
#include "device_flags.hpp"
#include "mem_budget.hpp"
#include "selftest/selftest_engine.hpp"
#include "selftest/selftest_report.hpp"

namespace probe {
namespace {

using conccl::Code;
using conccl::Status;
using namespace probe::selftest;

// --inject: what the emulator does to the chosen engine.
struct InjectPlan {
  std::string what;  // "stall", "lost-signal", "slow"; empty: none
  int gpu = 0, engine = -1;
};
// A slow engine: every packet takes this many times as long, so it runs at a
// twentieth of its own rate however loaded the machine is (a fixed delay per
// packet weighed less as load slowed every engine: 0.25 of its peers once).
constexpr uint32_t kSlowdown = 20;
// Default --slow-ratio on hardware and on the emulator.
constexpr double kSlowRatio = 0.5;
constexpr double kEmuSlowRatio = 0.25;
// Default --bytes on hardware and on the emulator.
constexpr uint64_t kBandwidthBytes = 64ull << 20;
constexpr uint64_t kEmuBandwidthBytes = 4ull << 20;

conccl::Result<InjectPlan> parse_inject(const Args& args, const conccl::Topology& t) {
  InjectPlan p;
  p.what = args.value("inject").value_or("");
  if (p.what.empty()) {
    if (args.has("inject-engine")) return conccl::error(Code::invalid_argument, "--inject-engine needs --inject");
    return p;
  }
  if (p.what != "stall" && p.what != "lost-signal" && p.what != "slow")
    return conccl::error(Code::invalid_argument, "--inject takes stall, lost-signal or slow, not '" + p.what + "'");
  const std::string sel = args.value("inject-engine").value_or("0:" + std::to_string(t.gpus[0].engines.at(0).id));
  const size_t colon = sel.find(':');
  const std::optional<uint64_t> g = colon == std::string::npos ? std::nullopt : parse_uint(sel.substr(0, colon));
  const std::optional<uint64_t> e = colon == std::string::npos ? std::nullopt : parse_uint(sel.substr(colon + 1));
  if (!g || !e) return conccl::error(Code::invalid_argument, "--inject-engine takes GPU:ENGINE (e.g. 0:2), not '" + sel + "'");
  if (*g >= t.gpus.size())
    return conccl::error(Code::invalid_argument, "--inject-engine " + sel + ": the node has GPUs 0.." +
                                                     std::to_string(t.gpus.size() - 1));
  const conccl::GpuInfo& gi = t.gpus[*g];
  std::string ids;
  bool found = false;
  for (const conccl::EngineInfo& ei : gi.engines) {
    ids += (ids.empty() ? "" : ",") + std::to_string(ei.id);
    found |= static_cast<uint64_t>(ei.id) == *e;
  }
  if (!found)
    return conccl::error(Code::invalid_argument, "--inject-engine " + sel + ": GPU " + std::to_string(*g) +
                                                     " has engines " + ids);
  p.gpu = static_cast<int>(*g);
  p.engine = static_cast<int>(*e);
  return p;
}

Status apply_inject(conccl::emu::EmuDevice& emu, const InjectPlan& p, const conccl::Isa& isa) {
  conccl::emu::Injection inj;
  if (p.what == "stall") inj.stall = true;
  if (p.what == "slow") inj.slowdown = kSlowdown;
  // The first completion the engine writes is a signal_set: on SDMA four
  // FENCEs (the twin's two dwords, then the value's), on Hopper one release.
  if (p.what == "lost-signal") inj.drop_completions = isa.is_sdma() ? 4 : 1;
  return emu.inject(p.gpu, p.engine, inj);
}

// Where a queue really runs: the emulator counts what each engine executed;
// the drivers do not say.
void check_placement(conccl::Device& dev, const conccl::emu::EngineStats* before, EngineRun& run, EngineReport& r) {
  auto* emu = dynamic_cast<conccl::emu::EmuDevice*>(&dev);
  const std::string backend = dev.topology().backend;
  if (!emu || !before) {
    r.placement = "not checkable";
    bool by_id = false;
    for (const std::string& n : dev.topology().notes) by_id |= n.find("queue mode: by-engine-id") != std::string::npos;
    if (backend == "kfd")
      r.placement_note = by_id ? "KFD does not report a queue's engine; in by-engine-id mode it creates the queue on "
                                 "the engine asked for or refuses it"
                               : "KFD does not report a queue's engine; in kernel-chooses mode the engine id only "
                                 "picks the pool (PCIe or xGMI)";
    else
      r.placement_note = "the driver does not report which engine a channel runs on";
    return;
  }
  conccl::Result<conccl::emu::EngineStats> after = emu->engine_stats(r.gpu, r.engine);
  if (!after.ok()) {
    r.placement = "not checkable";
    r.placement_note = after.status().to_string();
    return;
  }
  const uint64_t executed = after->bytes_copied - before->bytes_copied;
  r.placement_note = "engine " + std::to_string(r.gpu) + ":" + std::to_string(r.engine) + " executed " +
                     std::to_string(executed) + " bytes; this queue's commands moved " +
                     std::to_string(run.bytes_moved());
  r.placement = executed >= run.bytes_moved() ? "ok" : "WRONG";
  if (r.placement == "WRONG")
    r.findings.push_back({"placement", Cell::failed, "the queue did not run on the engine asked for: " + r.placement_note, {}});
}

// A hung engine may still write the destinations it was given: its GPU's
// and the peers' it copied into. Those get fresh ones.
void renew_after_hang(Memory& mem, const EngineReport& r, std::vector<std::string>* notes) {
  std::vector<int> gpus = {r.gpu};
  for (const PeerResult& p : r.peers) gpus.push_back(p.peer);
  for (int g : gpus)
    if (Status st = mem.renew_dst(g); !st.ok())
      notes->push_back("after the hang of engine " + std::to_string(r.gpu) + ":" + std::to_string(r.engine) +
                       ", GPU " + std::to_string(g) + "'s destination buffer could not be replaced (" + st.to_string() +
                       "): later results there may be disturbed by that engine");
}

// Names the engines that did not pass on stderr (the report is on stdout).
void print_failures(const std::vector<EngineReport>& reports, Context& ctx) {
  std::string names;
  size_t bad = 0;
  for (const EngineReport& r : reports) {
    if (r.verdict() == Verdict::pass) continue;
    if (++bad <= 8)
      names += std::string(bad > 1 ? ", " : "") + std::to_string(r.gpu) + ":" + std::to_string(r.engine) + " " +
               verdict_name(r.verdict());
  }
  if (bad > 8) names += ", and " + std::to_string(bad - 8) + " more";
  std::fprintf(ctx.err, "sdma-probe selftest: %zu of %zu engines did not pass (GPU:engine): %s\n", bad, reports.size(),
               names.c_str());
}

conccl::Result<Settings> parse_settings(const Args& args) {
  Settings s;
  // The emulator's bandwidth is the host's memcpy: a smaller default keeps
  // a run of 128 emulated engines to seconds.
  const uint64_t fallback = args.common().backend == Backend::emu ? kEmuBandwidthBytes : kBandwidthBytes;
  conccl::Result<uint64_t> bytes = args.get_size("bytes", fallback);
  if (!bytes.ok()) return bytes.status();
  if (*bytes < 4096 || *bytes > (4ull << 30))
    return conccl::error(Code::invalid_argument, "--bytes " + format_size(*bytes) + " is out of range: give 4K..4G");
  s.bandwidth_bytes = *bytes;
  conccl::Result<int64_t> reps = args.get_int_in_range("reps", 1, 100, 3);
  if (!reps.ok()) return reps.status();
  s.reps = static_cast<int>(*reps);
  s.timeout_ms = args.common().timeout_ms;
  s.all_peers = args.has("all-peers");
  return s;
}

// The command line, checked before the device opens.
struct SelftestFlags {
  Settings settings;
  double slow_ratio = kSlowRatio;  // --slow-ratio
  uint64_t seed = 1;               // --seed
};

Status read_selftest_flags(const Args& args, SelftestFlags* f) {
  if (!args.positionals().empty()) return conccl::error(Code::invalid_argument, "selftest takes no arguments");
  conccl::Result<Settings> settings = parse_settings(args);
  if (!settings.ok()) return settings.status();
  f->settings = *settings;
  conccl::Result<std::optional<double>> ratio_flag = args.get_double("slow-ratio");
  if (!ratio_flag.ok()) return ratio_flag.status();
  // The emulator's bandwidth is the host's memcpy, shared with everything
  // else the host runs: engines of one GPU vary by 2x there (L2/L3 effects,
  // scheduling), so only a larger gap is named by default.
  f->slow_ratio = ratio_flag->value_or(args.common().backend == Backend::emu ? kEmuSlowRatio : kSlowRatio);
  if (!(f->slow_ratio > 0 && f->slow_ratio < 1))
    return conccl::error(Code::invalid_argument, "--slow-ratio takes a number between 0 and 1 (default 0.5)");
  conccl::Result<uint64_t> seed = args.get_uint("seed", 1);
  if (!seed.ok()) return seed.status();
  f->seed = *seed;
  if ((args.has("inject") || args.has("inject-engine")) && args.common().backend != Backend::emu)
    return conccl::error(Code::invalid_argument, "--inject works only with --backend emu");
  return Status();
}

// One self-test from the device on. The members are made in the order they
// are declared, and go in reverse. Engine runs hold references to the
// device, the memory and the flags' settings.
class Selftest {
 public:
  Selftest(const Args& args, Context& ctx, const SelftestFlags& f)
      : args_(args), ctx_(ctx), f_(f), run_seed_(f.seed) {}

  // The device, the --inject plan, and the memory every engine's checks use.
  Status set_up();
  // Every engine, the slow ones again, and the report; returns the exit code
  // (or does not return, after a hang).
  int run();

 private:
  Status open();
  Status alloc_memory();
  int test_engine(const conccl::GpuInfo& g, size_t i);
  int inject_fault(EngineRun& run, const conccl::GpuInfo& g);
  void abandon(std::unique_ptr<EngineRun> run, const EngineReport& r, bool hung);
  void measure_slow_again();
  RunInfo run_info() const;
  int report();
  const conccl::Topology& topo() const { return dev_->topology(); }

  const Args& args_;
  Context& ctx_;
  const SelftestFlags& f_;
  std::unique_ptr<conccl::Device> dev_;
  InjectPlan inject_;
  conccl::emu::EmuDevice* emu_ = nullptr;  // the emulator's counters and injection; null on hardware
  std::optional<Memory> mem_;
  std::vector<EngineReport> reports_;
  std::vector<std::string> notes_;  // the run's own remarks
  // Runs whose engine hung or faulted: never destroyed (their memory and
  // queue may still be written by the engine); the process ends by _exit.
  std::vector<std::unique_ptr<EngineRun>> abandoned_;
  bool any_hang_ = false;
  uint64_t run_seed_;
};

Status Selftest::set_up() {
  CONCCL_RETURN_IF_ERROR(open());
  return alloc_memory();
}

Status Selftest::open() {
  conccl::Result<std::unique_ptr<conccl::Device>> devr = open_device_from_args(args_);
  if (!devr.ok()) return devr.status();
  dev_ = std::move(devr).value();
  if (topo().gpus.empty() || topo().gpus[0].engines.empty())
    return conccl::error(Code::unavailable, "the backend found no GPU with DMA engines");
  conccl::Result<InjectPlan> inject = parse_inject(args_, topo());
  if (!inject.ok()) return inject.status();
  inject_ = *inject;
  emu_ = dynamic_cast<conccl::emu::EmuDevice*>(dev_.get());
  return Status();
}

// Two buffers per GPU, as large as the largest GPU's checks need; refused up
// front when they do not fit.
Status Selftest::alloc_memory() {
  size_t bytes = 0;
  for (const conccl::GpuInfo& g : topo().gpus) bytes = std::max(bytes, buffer_bytes_needed(f_.settings, g.caps()));
  MemBudget need;
  need.gpu.assign(topo().gpus.size(), 2 * static_cast<uint64_t>(bytes));
  if (Status st = check_budget(need, topo(), args_.common().backend == Backend::emu,
                               "lower --bytes (now " + format_size(f_.settings.bandwidth_bytes) + ")", mem_available());
      !st.ok())
    return st.prefix("selftest");
  conccl::Result<Memory> mem = Memory::create(*dev_, bytes, f_.seed);
  if (!mem.ok()) return mem.status();
  mem_.emplace(std::move(mem).value());
  return Status();
}

int Selftest::run() {
  for (const conccl::GpuInfo& g : topo().gpus)
    for (size_t i = 0; i < g.engines.size(); ++i)
      if (int rc = test_engine(g, i); rc >= 0) return rc;
  measure_slow_again();
  return report();
}

// Every check on engine i of GPU g into a report; -1 to go on, else the exit
// code (the engine's run is still there when the failure is printed).
int Selftest::test_engine(const conccl::GpuInfo& g, size_t i) {
  EngineReport r;
  r.gpu = g.index;
  r.engine = g.engines[i].id;
  r.kind = conccl::engine_kind_name(g.engines[i].kind);
  r.weight = g.engines[i].weight;
  std::optional<conccl::emu::EngineStats> before;
  if (emu_)
    if (conccl::Result<conccl::emu::EngineStats> s = emu_->engine_stats(r.gpu, r.engine); s.ok()) before = *s;
  conccl::Result<std::unique_ptr<EngineRun>> run =
      EngineRun::create(*dev_, *mem_, r.gpu, r.engine, f_.settings, ++run_seed_);
  if (!run.ok()) {
    const Code code = run.status().code();  // out of queues or a fault: exit 4, as exit_code_for maps them
    const Cell cell = code == Code::device_fault || code == Code::resource_exhausted ? Cell::faulted : Cell::failed;
    r.findings.push_back({"queue", cell, "creating a queue: " + run.status().to_string(), {}});
    r.placement = "-";
    reports_.push_back(std::move(r));
    return -1;
  }
  if (!inject_.what.empty() && inject_.gpu == r.gpu && inject_.engine == r.engine)
    if (int rc = inject_fault(**run, g); rc >= 0) return rc;
  (*run)->run_all(g, i, r);
  if (r.stopped()) {
    r.placement = "-";
    abandon(std::move(*run), r, r.verdict() == Verdict::hang);
  } else {
    check_placement(*dev_, before ? &*before : nullptr, **run, r);
  }
  reports_.push_back(std::move(r));
  return -1;
}

// Injected once the queue exists and has run what creating it queued (a
// Hopper channel binds its copy class, and that entry's completion write
// would otherwise take a dropped completion meant for the checks), so that
// the checks' first commands meet it. -1 to go on, else the exit code.
int Selftest::inject_fault(EngineRun& run, const conccl::GpuInfo& g) {
  conccl::Queue& q = run.queue();
  if (Status st = q.wait_done(conccl::Deadline::after_ms(5000), q.submitted()); !st.ok())
    return fail(args_, ctx_, st.prefix("before injecting the fault"));
  if (Status st = apply_inject(*emu_, inject_, g.isa); !st.ok()) return fail(args_, ctx_, st);
  return -1;
}

// An engine that stopped: a fault is cleared on the emulator (what is left
// is dropped); after a hang the destinations it may still write are renewed.
void Selftest::abandon(std::unique_ptr<EngineRun> run, const EngineReport& r, bool hung) {
  any_hang_ |= hung;
  if (emu_ && !hung) (void)emu_->reset_engine(r.gpu, r.engine);
  abandoned_.push_back(std::move(run));
  if (hung) renew_after_hang(*mem_, r, &notes_);
}

// Engines below their peers are measured once more before being named, so
// that one unlucky measurement (a busy host) does not condemn an engine.
void Selftest::measure_slow_again() {
  for (size_t i : mark_slow(reports_, f_.slow_ratio)) {
    EngineReport& r = reports_[i];
    Settings again = f_.settings;
    again.reps = std::min(2 * f_.settings.reps, 100);
    conccl::Result<std::unique_ptr<EngineRun>> run =
        EngineRun::create(*dev_, *mem_, r.gpu, r.engine, again, ++run_seed_);
    if (!run.ok()) continue;
    double gbps = 0;
    const Outcome o = (*run)->bandwidth(&gbps);
    if (o.cell != Cell::ok) {
      r.findings.push_back({"bandwidth (again)", o.cell, o.message, o.hang_kind});
      abandoned_.push_back(std::move(*run));
      any_hang_ |= o.cell == Cell::hung;
      if (o.cell == Cell::hung) renew_after_hang(*mem_, r, &notes_);
      continue;
    }
    r.gbps = std::max(r.gbps, gbps);
  }
  mark_slow(reports_, f_.slow_ratio);
}

RunInfo Selftest::run_info() const {
  RunInfo info;
  info.backend = topo().backend;
  info.preset = topo().preset;
  info.bandwidth_bytes = f_.settings.bandwidth_bytes;
  info.reps = f_.settings.reps;
  info.slow_ratio = f_.slow_ratio;
  info.timeout_ms = f_.settings.timeout_ms;
  info.all_peers = f_.settings.all_peers;
  if (!inject_.what.empty())
    info.injected =
        inject_.what + " on engine " + std::to_string(inject_.engine) + " of GPU " + std::to_string(inject_.gpu);
  info.notes = topo().notes;
  for (const std::string& n : mem_->notes()) info.notes.push_back(n);
  for (const std::string& n : notes_) info.notes.push_back(n);
  return info;
}

// The report on stdout, the engines that did not pass on stderr.
int Selftest::report() {
  const RunInfo info = run_info();
  const std::string out = args_.common().json ? report_json(info, reports_) : report_table(info, reports_);
  std::fputs(out.c_str(), ctx_.out);
  const ExitCode rc = selftest_exit_code(reports_);
  if (rc != ExitCode::ok) print_failures(reports_, ctx_);
  // A hung engine may still hold work: end without tearing the device down.
  if (any_hang_ || !abandoned_.empty()) end_after_hang(rc);
  return to_int(rc);
}

int run_selftest(const Args& args, Context& ctx) {
  SelftestFlags f;
  if (Status st = read_selftest_flags(args, &f); !st.ok()) return fail(args, ctx, st);
  Selftest test(args, ctx, f);
  if (Status st = test.set_up(); !st.ok()) return fail(args, ctx, st);
  return test.run();
}

const Registration selftest_reg({
    .name = "selftest",
    .summary = "bring-up self-test: every check on every engine of every GPU, one matrix; run it first",
    .usage = "sdma-probe selftest [--backend emu|kfd|nv] [--preset P] [--gpus N] [--engines K] [--bytes SIZE]\n"
             "                    [--reps N] [--all-peers] [--slow-ratio R] [--seed N] [--timeout-ms N] [--json]\n"
             "                    [--inject stall|lost-signal|slow [--inject-engine GPU:ENGINE]]",
    .details =
        "On every engine of every GPU, through one queue each, one engine at a time:\n"
        "  copy       verified copies of random data, 1 B to 256 KiB, odd sizes and offsets, and one\n"
        "             crossing the per-command limit where it is at most 16 MiB (SDMA 4.x: 4 MiB);\n"
        "             every byte and 64 guard bytes either side checked\n"
        "  fill       verified constant fills, 4 B to 256 KiB (+ one crossing the limit where cheap)\n"
        "  signal     signal_set: the value (and the SDMA twin at +8) as the engine wrote them\n"
        "  wake       the host sleeps on the engine's wake-up (SDMA TRAP, Hopper non-stall interrupt)\n"
        "  poll       wait_ge on a host signal: the work behind it must wait for the host's release\n"
        "  atomic     signal_add twice (skipped where the queue has no 64-bit atomics)\n"
        "  timestamp  two engine timestamps around a copy: written, and in order\n"
        "  peers      a verified copy into peers over the links (a sample: the peer the engine is\n"
        "             recommended for and one by rotation; --all-peers for every peer)\n"
        "  GB/s       the best of --reps copies of --bytes (default 64 MiB; emulator 4 MiB) in the GPU\n"
        "  placement  whether the queue ran on the engine asked for (emulator: its counters;\n"
        "             KFD and NVIDIA: not checkable)\n"
        "An engine is slow when its GB/s is below --slow-ratio (default 0.5; emulator 0.25) x the\n"
        "median of the other engines of the same GPU, kind and weight (NVIDIA: PCE count), measured twice. Every wait\n"
        "has --timeout-ms; an engine that hangs is reported with the diagnosis, its queue is\n"
        "abandoned and the test goes on with the next engine.\n"
        "--json prints {\"engines\": [per engine: checks, peers, gbps, placement, verdict,\n"
        "findings], \"failed\", \"hung\" (with \"hang_kind\" and \"diagnosis\"), \"faulted\", \"slow\",\n"
        "\"summary\", \"verdict\", \"exit_code\"} (docs/sdma-probe.md lists every field).\n"
        "Exit: 0 every engine passed; 3 an engine hung; else 4 an engine faulted; else 1 a check\n"
        "failed or an engine is slow; 5 the backend is not available; 2 usage.\n"
        "--inject (emulator) makes one engine (--inject-engine, default the first of GPU 0) stall,\n"
        "lose its first signal write, or take 20 times as long over every packet (slow).\n",
    .flags = with_flags(device_flag_specs(), {
        {.name = "bytes", .value = "SIZE", .help = "bandwidth copy size (default 64M, emu 4M; 4K..4G)"},
        {.name = "reps", .value = "N", .help = "bandwidth copies per engine, the best counts (default 3)"},
        {.name = "all-peers", .help = "copy from every engine into every linked peer (default: a sample)"},
        {.name = "slow-ratio", .value = "R", .help = "slow below R x the group's median GB/s (default 0.5; emu 0.25)"},
        {.name = "seed", .value = "N", .help = "random data seed (default 1)"},
        {.name = "inject", .value = "stall|lost-signal|slow", .help = "emulator fault injection"},
        {.name = "inject-engine", .value = "GPU:ENGINE", .help = "the engine --inject hits (default 0:first)"},
    }),
    .run = run_selftest,
    .order = 15,
});

}  // namespace
}  // namespace probe
