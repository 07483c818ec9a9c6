// tools/bench/bench_signal.cpp - completion latency on the emulated node.
//
//   bench_signal [--iters N] [--json FILE]
//
// Measures, on one emulated engine:
//   empty_signal   host submit -> host sees the signal (packets: signal add)
//   copy_4k        host submit -> host sees the signal after a 4 KiB copy
//   event_wakeup   engine's TIMESTAMP just before TRAP -> host thread woken
//                  from Event::wait (it was asleep, not spinning)
// Prints a table (median, p99, min in microseconds) and writes JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "conccl/emu.hpp"
#include "conccl/signal.hpp"

using namespace conccl;

namespace {

struct Row {
  std::string name;
  std::vector<double> us;
};

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch()).count());
}

bool check(const Status& st, const char* what) {
  if (!st.ok()) std::fprintf(stderr, "bench_signal: %s: %s\n", what, st.to_string().c_str());
  return st.ok();
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 2000;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::max(10, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_signal [--iters N] [--json FILE]\n");
      return 2;
    }
  }
  DeviceOptions o;
  o.settings = "preset=small";
  auto devr = emu::create(o);
  if (!devr.ok() || !check(devr.status(), "create")) return 5;
  Device& dev = **devr;
  auto q = dev.create_queue(0, 2);
  auto sig = Signal::create(dev);
  auto src = dev.alloc(0, 4096, MemKind::device), dst = dev.alloc(1, 4096, MemKind::device);
  auto ts = dev.alloc(-1, 4096, MemKind::host);
  if (!q.ok() || !sig.ok() || !src.ok() || !dst.ok() || !ts.ok()) return 4;
  std::memset(src->host, 0x5A, 4096);

  std::vector<Row> rows;
  uint64_t target = 0;
  auto round_trip = [&](const char* name, bool with_copy) -> bool {
    Row r{name, {}};
    for (int i = -50; i < iters; ++i) {  // 50 warm-up rounds
      CommandBuffer cb = (*q)->command_buffer();
      if (with_copy && !check(cb.copy(dst->va, src->va, 4096), "copy")) return false;
      if (!check(sig->signal_add(cb, 1), "signal")) return false;
      ++target;
      const auto t0 = std::chrono::steady_clock::now();
      QueueSpan span;
      if (!check((*q)->submit(cb, Deadline::after_ms(1000), &span), "submit")) return false;
      if (!check(sig->wait(target, Deadline::after_ms(1000), &span), "wait")) return false;
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 0) r.us.push_back(us);
    }
    rows.push_back(std::move(r));
    return true;
  };
  if (!round_trip("empty_signal", false) || !round_trip("copy_4k", true)) return 4;

  // Event wake-up: the engine waits on a trigger, writes a timestamp, traps;
  // the host thread is already asleep in Event::wait when the trigger opens.
  {
    auto trig = Trigger::create(dev);
    if (!trig.ok()) return 4;
    Row r{"event_wakeup", {}};
    const int n = std::max(20, iters / 10);
    for (int i = -5; i < n; ++i) {
      CommandBuffer cb = (*q)->command_buffer();
      if (!check(trig->arm(cb), "arm") || !check(cb.timestamp(ts->va), "ts") || !check(SdmaPackets(cb).trap(7), "trap")) return 4;
      const uint64_t before = (*q)->wake_event()->count();
      if (!check((*q)->submit(cb, Deadline::after_ms(1000)), "submit")) return 4;
      uint64_t woke = 0;
      Status st;
      std::thread waiter([&] {
        st = (*q)->wake_event()->wait(before + 1, Deadline::after_ms(2000));
        woke = now_ns();
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let it fall asleep
      trig->release();
      waiter.join();
      if (!check(st, "event wait")) return 3;
      const uint64_t engine_ts = *ts->as<uint64_t>();
      if (i >= 0) r.us.push_back(static_cast<double>(woke - engine_ts) / 1000.0);
    }
    rows.push_back(std::move(r));
  }

  std::printf("%-14s %8s %10s %10s %10s\n", "metric", "samples", "median_us", "p99_us", "min_us");
  for (const Row& r : rows)
    std::printf("%-14s %8zu %10.2f %10.2f %10.2f\n", r.name.c_str(), r.us.size(), pct(r.us, 0.5), pct(r.us, 0.99),
                pct(r.us, 0.0));
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::perror(json.c_str());
      return 2;
    }
    std::fprintf(f, "{\"backend\": \"emu\", \"rows\": [");
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f, "%s{\"metric\": \"%s\", \"samples\": %zu, \"median_us\": %.3f, \"p99_us\": %.3f, \"min_us\": %.3f}",
                   i ? ", " : "", rows[i].name.c_str(), rows[i].us.size(), pct(rows[i].us, 0.5), pct(rows[i].us, 0.99),
                   pct(rows[i].us, 0.0));
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
