// tools/bench/nv_handoff_bench.cpp - how long a copy-engine channel takes to
// get past a semaphore acquire, by who releases it and from where: the
// hand-off every cross-process collective makes (issues #25, #28, #29).
//
//   nv_handoff_bench [--rounds N] [--samples N] [--json PATH]
//
// Cases (us; every wait with a deadline; the values always grow, so nothing
// is reset between samples):
//   submit-to-seen   the host submits a release and spins until it lands:
//                    doorbell, fetch and release, the floor of any hand-off.
//   host-late D      the list [acquire g >= k (yield | hold); release s = k]
//                    is submitted, the host waits D us, stores g = k and times
//                    until s = k. With D = 0 the acquire finds g set or nearly;
//                    with D >= 5 it has failed first (the channel switched out
//                    for yield, kept retrying for hold).
//   ping-pong        two channels pass a token back and forth `rounds` times,
//                    every round submitted up front on both: A [acquire
//                    a >= k; release b = k], B [acquire b >= k; release
//                    a = k + 1]; us per hand-off. The channels are on one LCE
//                    (two TSGs on one runlist) or on two, in one process or
//                    in two (the second a forked child with its own RM client,
//                    the semaphores in a shared page both map).
//   1 KiB copy + arrival, on one channel or two at once: the floor of a
//                    one-process small all-gather (lists_floor).
// Prints a table last and writes JSON. Needs the nv backend (no CUDA).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "conccl/hopper_methods.hpp"
#include "tools/bench/nv_bench_util.hpp"

using namespace conccl;
using namespace conccl::nv;
using Clock = std::chrono::steady_clock;
using Style = CommandBuffer::WaitStyle;

namespace {

struct Row {
  std::string name;
  bench::Stats us;
  bool failed = false;
};

// Runs one case (`fn` fills the samples, false when the case broke) and
// adds its row.
template <typename Fn>
void run_case(std::vector<Row>* rows, std::string name, Fn&& fn) {
  std::vector<double> v;
  const bool good = fn(&v);
  rows->push_back(Row{std::move(name), bench::stats(std::move(v)), !good});
}

const char* style_name(Style s) { return s == Style::yield ? "yield" : "hold"; }

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// Spins until *p >= want; false after `limit_us`.
bool spin_ge(volatile uint64_t* p, uint64_t want, double limit_us = 2e6) {
  const auto t0 = Clock::now();
  while (*p < want)
    if (us_since(t0) > limit_us) return false;
  return true;
}

void store(volatile uint64_t* p, uint64_t v) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  *p = v;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void spin_for(double us) {
  const auto t0 = Clock::now();
  while (us_since(t0) < us) {
  }
}

// Collects `want` samples, dropping those of the first `warm_ms`: an idle
// GPU's copy-engine clock needs about a second of work to come up from 765
// MHz (docs/perf/h200-collectives.md, run 58), and every case starts after
// a gap (allocations, a fork, opening the GPU).
struct Sampler {
  Sampler(int want, double warm_ms, std::vector<double>* out) : want_(want), warm_ms_(warm_ms), out_(out) {}
  bool done() const { return int(out_->size()) >= want_; }
  void add(double us) {
    if (us_since(start_) >= warm_ms_ * 1e3) out_->push_back(us);
  }
  int want_;
  double warm_ms_;
  std::vector<double>* out_;
  Clock::time_point start_ = Clock::now();
};
double g_warm_ms = 1500;  // the first case of a process; later ones 200 (main)

#define TRY(x)                                                        \
  do {                                                                \
    Status s_ = (x);                                                  \
    if (!s_.ok()) {                                                   \
      std::fprintf(stderr, "%s: %s\n", #x, s_.to_string().c_str()); \
      return false;                                                   \
    }                                                                 \
  } while (0)

bool submit_to_seen(Gpu& g, Channel& ch, int samples, std::vector<double>* out) {
  Result<uint64_t> s = g.alloc_slot();
  if (!s.ok()) return false;
  volatile uint64_t* h = g.slot_host(*s);
  store(h, 0);
  Sampler smp(samples, g_warm_ms, out);
  for (int k = 1; !smp.done(); ++k) {
    CommandBuffer cb = ch.commands();
    TRY(cb.signal_set(*s, uint64_t(k)));
    const auto t0 = Clock::now();
    TRY(ch.submit(cb, Deadline::after_ms(1000)));
    if (!spin_ge(h, uint64_t(k))) {
      std::fprintf(stderr, "submit-to-seen: no release after 2 s: %s\n", ch.diagnose().c_str());
      return false;
    }
    smp.add(us_since(t0));
  }
  return ch.wait_done(Deadline::after_ms(5000)).ok();
}

bool host_late(Gpu& g, Channel& ch, Style style, double delay_us, int samples, std::vector<double>* out) {
  Result<uint64_t> gate = g.alloc_slot(), s = g.alloc_slot();
  if (!gate.ok() || !s.ok()) return false;
  volatile uint64_t* hg = g.slot_host(*gate);
  volatile uint64_t* hs = g.slot_host(*s);
  store(hg, 0);
  store(hs, 0);
  Sampler smp(samples, g_warm_ms, out);
  for (int k = 1; !smp.done(); ++k) {
    CommandBuffer cb = ch.commands();
    TRY(cb.wait_ge(*gate, uint64_t(k), style));
    TRY(cb.signal_set(*s, uint64_t(k)));
    TRY(ch.submit(cb, Deadline::after_ms(1000)));
    spin_for(delay_us);
    store(hg, uint64_t(k));
    const auto t0 = Clock::now();
    if (!spin_ge(hs, uint64_t(k))) {
      std::fprintf(stderr, "host-late: no release after 2 s: %s\n", ch.diagnose().c_str());
      return false;
    }
    smp.add(us_since(t0));
  }
  return ch.wait_done(Deadline::after_ms(5000)).ok();
}

// The floor of a small one-process all-gather: one list per channel, each
// a 1 KiB copy and then its arrival, submitted back to back; the host spins
// until every arrival is in. Arrival forms: add (the library's signal_add:
// a wait for idle, then a semaphore add), copy_add (the copy's own
// LAUNCH_DMA semaphore reduction, no wait for idle: CONCCL_FOLD_ARRIVALS),
// set (a plain release after the copy), add_device (signal_add into a word
// of device memory: an L2 atomic instead of one on host memory over PCIe),
// none (the copy alone). The host spins on the arrival word where it is in
// host memory, else on the channel's timeline (the release every
// submission ends with). What a plan adds on top (its launch, its waits)
// is the difference to sdma-probe's all-gather.
enum class Arrival { add, copy_add, set, add_device, none };
const char* arrival_name(Arrival a) {
  switch (a) {
    case Arrival::add: return "add";
    case Arrival::copy_add: return "copy_add";
    case Arrival::set: return "set";
    case Arrival::add_device: return "add to device memory, timeline seen";
    case Arrival::none: return "nothing, timeline seen";
  }
  return "?";
}

bool lists_floor(Gpu& g, const std::vector<Channel*>& chans, Arrival form, int samples, std::vector<double>* out) {
  Result<Allocation> buf = g.alloc(1u << 20, Placement::device);
  if (!buf.ok()) return false;
  std::vector<uint64_t> slot;
  for (size_t i = 0; i < chans.size(); ++i) {
    Result<uint64_t> s = g.alloc_slot();
    if (!s.ok()) return false;
    slot.push_back(*s);
    store(g.slot_host(*s), 0);
  }
  const uint64_t b = buf->va;
  const bool on_timeline = form == Arrival::add_device || form == Arrival::none;
  Sampler smp(samples, g_warm_ms, out);
  for (int k = 1; !smp.done(); ++k) {
    std::vector<CommandBuffer> cbs;
    for (size_t i = 0; i < chans.size(); ++i) {
      CommandBuffer cb = chans[i]->commands();
      const uint64_t dst = b + 0x10000 * (i + 1), src = b + 0x400 * i;
      if (form == Arrival::copy_add) {
        TRY(cb.copy_add(dst, src, 1024, CommandBuffer::CopyOrder::after_earlier, slot[i], 1));
      } else if (on_timeline) {
        TRY(cb.copy(dst, src, 1024));
        if (form == Arrival::add_device) TRY(cb.signal_add(b + 0x80000 + 16 * i, 1));
      } else {
        TRY(cb.copy(dst, src, 1024));
        TRY(form == Arrival::add ? cb.signal_add(slot[i], 1) : cb.signal_set(slot[i], uint64_t(k)));
      }
      cbs.push_back(std::move(cb));
    }
    const auto t0 = Clock::now();
    std::vector<uint64_t> ticket(chans.size(), 0);
    for (size_t i = 0; i < chans.size(); ++i) TRY(chans[i]->submit(cbs[i], Deadline::after_ms(1000), &ticket[i]));
    for (size_t i = 0; i < chans.size(); ++i) {
      if (on_timeline) {
        const auto w0 = Clock::now();
        while (chans[i]->completed() < ticket[i])
          if (us_since(w0) > 2e6) {
            std::fprintf(stderr, "lists floor: timeline stuck\n%s\n", chans[i]->diagnose().c_str());
            return false;
          }
        continue;
      }
      if (!spin_ge(g.slot_host(slot[i]), uint64_t(k))) {
        std::fprintf(stderr, "lists floor: no arrival after 2 s\n%s\n", chans[i]->diagnose().c_str());
        return false;
      }
    }
    smp.add(us_since(t0));
    for (Channel* c : chans) TRY(c->wait_done(Deadline::after_ms(5000)));
  }
  return g.free(*buf).ok();
}

// One side's rounds of a ping-pong: wait mine >= base + k, set theirs.
Status record_side(CommandBuffer& cb, bool first, uint64_t mine, uint64_t theirs, uint64_t base, int rounds,
                   Style style) {
  for (int k = 1; k <= rounds; ++k) {
    CONCCL_RETURN_IF_ERROR(cb.wait_ge(mine, base + uint64_t(k), style));
    CONCCL_RETURN_IF_ERROR(cb.signal_set(theirs, base + uint64_t(k) + (first ? 0 : 1)));
  }
  return Status();
}

// Both sides in this process. a, b: host-visible slots.
bool ping_pong_local(Channel& x, Channel& y, uint64_t a, uint64_t b, volatile uint64_t* ha, volatile uint64_t* hb,
                     Style style, int rounds, int samples, std::vector<double>* out) {
  store(ha, 0);
  store(hb, 0);
  Sampler smp(samples, g_warm_ms, out);
  for (int e = 0; !smp.done(); ++e) {
    const uint64_t base = uint64_t(e) * uint64_t(rounds + 1);
    CommandBuffer cx = x.commands(), cy = y.commands();
    TRY(record_side(cx, true, a, b, base, rounds, style));
    TRY(record_side(cy, false, b, a, base, rounds, style));
    TRY(x.submit(cx, Deadline::after_ms(1000)));
    TRY(y.submit(cy, Deadline::after_ms(1000)));
    spin_for(20);  // both sit at their first acquire
    const auto t0 = Clock::now();
    store(ha, base + 1);
    if (!spin_ge(ha, base + uint64_t(rounds) + 1)) {
      std::fprintf(stderr, "ping-pong: stuck at a=%llu b=%llu\n%s\n%s\n", (unsigned long long)*ha,
                   (unsigned long long)*hb, x.diagnose().c_str(), y.diagnose().c_str());
      return false;
    }
    smp.add(us_since(t0) / (2.0 * rounds));
    TRY(x.wait_done(Deadline::after_ms(5000)));
    TRY(y.wait_done(Deadline::after_ms(5000)));
  }
  return true;
}

// The shared page of the two-process case: the semaphores, then the
// processes' own handshake words.
struct SharedPage {
  volatile uint64_t a, pad0[7];
  volatile uint64_t b, pad1[7];
  std::atomic<int64_t> child_epoch;  // epochs the child has submitted; -1: failed
  std::atomic<int64_t> parent_epoch; // epochs the parent has finished timing
  std::atomic<int64_t> epochs;       // how many there are: set by the parent once it has its samples
};

Channel* channel_on(Gpu& g, int lce) {
  for (size_t i = 0; i < g.channel_count(); ++i)
    if (g.channel(i).lce() == lce) return &g.channel(i);
  return nullptr;
}

// The child: its own Gpu, its channel on `lce`, side B of every epoch.
int child_main(SharedPage* page, int lce, Style style, int rounds) {
  Result<std::unique_ptr<Gpu>> g = Gpu::open();
  Channel* ch = g.ok() ? channel_on(**g, lce) : nullptr;
  Result<Allocation> m = ch ? (*g)->map_host(page, 4096) : Result<Allocation>(error(Code::unavailable, "no gpu"));
  if (!m.ok()) {
    std::fprintf(stderr, "child: %s\n", g.ok() ? m.status().to_string().c_str() : g.status().to_string().c_str());
    page->child_epoch.store(-1);
    return 1;
  }
  const uint64_t a = uint64_t(&page->a), b = uint64_t(&page->b);
  for (int e = 0; e < page->epochs.load(); ++e) {
    const uint64_t base = uint64_t(e) * uint64_t(rounds + 1);
    CommandBuffer cb = ch->commands();
    if (!record_side(cb, false, b, a, base, rounds, style).ok() || !ch->submit(cb, Deadline::after_ms(1000)).ok()) {
      page->child_epoch.store(-1);
      return 1;
    }
    page->child_epoch.store(e + 1);
    if (!ch->wait_done(Deadline::after_ms(10000)).ok()) {
      std::fprintf(stderr, "child: epoch %d did not end: %s\n", e, ch->diagnose().c_str());
      page->child_epoch.store(-1);
      return 1;
    }
    const auto t0 = Clock::now();
    while (page->parent_epoch.load() < e + 1)
      if (us_since(t0) > 1e7) return 1;
  }
  return 0;
}

// Forks the child first, then opens this process's own Gpu: neither
// inherits the other's RM file descriptors.
bool ping_pong_procs(SharedPage* page, int my_lce, int child_lce, Style style, int rounds, int samples,
                     std::vector<double>* out) {
  page->a = 0;
  page->b = 0;
  page->child_epoch.store(0);
  page->parent_epoch.store(0);
  page->epochs.store(INT64_MAX);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) _exit(child_main(page, child_lce, style, rounds));
  Result<std::unique_ptr<Gpu>> g = Gpu::open();
  Channel* ch = g.ok() ? channel_on(**g, my_lce) : nullptr;
  Result<Allocation> m = ch ? (*g)->map_host(page, 4096) : Result<Allocation>(error(Code::unavailable, "no gpu"));
  bool good = m.ok();
  if (!good) std::fprintf(stderr, "parent: %s\n", g.ok() ? m.status().to_string().c_str() : g.status().to_string().c_str());
  const uint64_t a = uint64_t(&page->a), b = uint64_t(&page->b);
  Sampler smp(samples, g_warm_ms, out);
  for (int e = 0; !smp.done() && good; ++e) {
    const uint64_t base = uint64_t(e) * uint64_t(rounds + 1);
    CommandBuffer cb = ch->commands();
    good = record_side(cb, true, a, b, base, rounds, style).ok() && ch->submit(cb, Deadline::after_ms(1000)).ok();
    const auto w0 = Clock::now();
    while (good && page->child_epoch.load() < e + 1) {
      if (page->child_epoch.load() < 0 || us_since(w0) > 3e7) good = false;
    }
    if (!good) break;
    spin_for(20);
    const auto t0 = Clock::now();
    store(&page->a, base + 1);
    if (!spin_ge(&page->a, base + uint64_t(rounds) + 1)) {
      std::fprintf(stderr, "ping-pong (2 procs): stuck at a=%llu b=%llu\n%s\n", (unsigned long long)page->a,
                   (unsigned long long)page->b, ch->diagnose().c_str());
      good = false;
      break;
    }
    smp.add(us_since(t0) / (2.0 * rounds));
    good = ch->wait_done(Deadline::after_ms(5000)).ok();
    if (smp.done()) page->epochs.store(e + 1);  // before parent_epoch: the child reads it after
    page->parent_epoch.store(e + 1);
  }
  if (!good) page->parent_epoch.store(1 << 30);
  int wst = 0;
  waitpid(pid, &wst, 0);
  return good && WIFEXITED(wst) && WEXITSTATUS(wst) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 100, samples = 200;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: nv_handoff_bench [--rounds N] [--samples N] [--json PATH]\n");
      return 2;
    }
  }
  if (rounds < 1 || samples < 1) return 2;
  // The two-process case's page: made before any RM object exists, so the
  // child forks from a process whose only GPU state is its own later Gpu.
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 4;
  std::memset(mem, 0, 4096);
  auto* page = new (mem) SharedPage{};

  std::vector<Row> rows;
  // Two-process cases first, while this process holds no Gpu (the probe
  // that lists the LCEs is closed before the first fork).
  Result<std::unique_ptr<Gpu>> probe = Gpu::open();
  if (!probe.ok()) {
    std::fprintf(stderr, "nv backend unavailable: %s\n", probe.status().to_string().c_str());
    return 5;
  }
  std::vector<int> lces;
  for (size_t i = 0; i < (*probe)->channel_count(); ++i) lces.push_back((*probe)->channel(i).lce());
  probe->reset();
  const int l0 = lces[0], l1 = lces.size() > 1 ? lces[1] : lces[0];
  for (Style style : {Style::yield, Style::hold})
    for (int other : {l0, l1}) {
      if (style == Style::hold && other == l0) continue;  // one runlist, held: each side waits out a timeslice
      run_case(&rows,
               std::string("ping-pong, 2 procs, ") + (other == l0 ? "one LCE" : "two LCEs") + ", " + style_name(style),
               [&](std::vector<double>* v) { return ping_pong_procs(page, l0, other, style, rounds, samples, v); });
    }

  Result<std::unique_ptr<Gpu>> g = Gpu::open();
  if (!g.ok()) return 5;
  Gpu& gpu = **g;
  // The first case here warms the GPU for 1.5 s; the others follow it
  // closely and drop only their first 200 ms.
  Channel& c0 = gpu.channel(0);
  run_case(&rows, "submit-to-seen", [&](std::vector<double>* v) { return submit_to_seen(gpu, c0, samples, v); });
  g_warm_ms = 200;
  {
    std::vector<std::pair<std::string, std::vector<Channel*>>> sets;
    for (size_t i = 0; i < gpu.channel_count(); ++i)
      sets.push_back({"LCE" + std::to_string(gpu.channel(i).lce()), {&gpu.channel(i)}});
    for (size_t i = 1; i < gpu.channel_count(); ++i)
      sets.push_back({"LCE" + std::to_string(c0.lce()) + "+LCE" + std::to_string(gpu.channel(i).lce()),
                      {&c0, &gpu.channel(i)}});
    for (Arrival form : {Arrival::add, Arrival::copy_add, Arrival::set, Arrival::add_device, Arrival::none})
      for (auto& [where, chans] : sets)
        run_case(&rows, "1 KiB copy + " + std::string(arrival_name(form)) + ", " + where,
                 [&](std::vector<double>* v) { return lists_floor(gpu, chans, form, samples, v); });
  }
  for (Style style : {Style::yield, Style::hold})
    for (double d : {0.0, 5.0, 20.0, 100.0}) {
      char name[96];
      std::snprintf(name, sizeof name, "host-late %g us, %s", d, style_name(style));
      run_case(&rows, name, [&](std::vector<double>* v) { return host_late(gpu, c0, style, d, samples, v); });
    }
  Result<uint64_t> a = gpu.alloc_slot(), b = gpu.alloc_slot();
  if (!a.ok() || !b.ok()) return 4;
  Result<std::unique_ptr<GpfifoQueue>> q = gpu.create_queue(c0.lce(), 1u << 20);
  if (!q.ok()) {
    std::fprintf(stderr, "second channel on LCE%d: %s\n", c0.lce(), q.status().to_string().c_str());
    return 4;
  }
  Channel twin(std::move(*q));
  Channel& other_lce = gpu.channel(gpu.channel_count() > 1 ? 1 : 0);
  for (Style style : {Style::yield, Style::hold}) {
    run_case(&rows, std::string("ping-pong, 1 proc, two LCEs, ") + style_name(style), [&](std::vector<double>* v) {
      return ping_pong_local(c0, other_lce, *a, *b, gpu.slot_host(*a), gpu.slot_host(*b), style, rounds, samples, v);
    });
    if (style == Style::yield)  // held on one runlist, each side would wait out a timeslice
      run_case(&rows, std::string("ping-pong, 1 proc, one LCE (two TSGs), ") + style_name(style),
               [&](std::vector<double>* v) {
                 return ping_pong_local(c0, twin, *a, *b, gpu.slot_host(*a), gpu.slot_host(*b), style, rounds,
                                        samples, v);
               });
  }

  std::printf("GPU: LCEs %d and %d; %d rounds per ping-pong, %d samples\n", l0, l1, rounds, samples);
  std::printf("%-52s %10s %10s\n", "case (us per hand-off)", "median", "p90");
  std::string js = "{\"rounds\":" + std::to_string(rounds) + ",\"rows\":[";
  bool failed = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    failed = failed || r.failed;
    std::printf("%-52s %10.2f %10.2f%s\n", r.name.c_str(), r.us.median, r.us.p90, r.failed ? " (FAILED)" : "");
    js += std::string(i ? "," : "") + "{\"case\":\"" + r.name + "\",\"failed\":" + (r.failed ? "true" : "false") +
          ",\"us\":" + bench::stats_json(r.us) + "}";
  }
  js += "]}\n";
  if (!json.empty()) {
    if (FILE* f = std::fopen(json.c_str(), "w")) {
      std::fputs(js.c_str(), f);
      std::fclose(f);
    }
  }
  return failed ? 1 : 0;
}
