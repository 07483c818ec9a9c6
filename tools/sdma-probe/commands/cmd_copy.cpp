// tools/sdma-probe/cmd_copy.cpp - `sdma-probe copy`: one verified copy between GPUs.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

#include "cli.hpp"
#include "selftest/selftest_memory.hpp"
#include "conccl/emu.hpp"
#include "conccl/signal.hpp"
#include "device_flags.hpp"
#include "mem_budget.hpp"

namespace probe {
namespace {

using conccl::Code;
using conccl::Status;

void random_fill(void* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  selftest::random_bytes(rng, p, n);
}

int run_copy(const Args& args, Context& ctx) {
  if (!args.positionals().empty()) return usage_error(args, ctx, "copy takes no positional arguments");
  conccl::Result<std::optional<int64_t>> src = args.get_int_in_range("src", 0, kMaxGpus - 1);
  conccl::Result<std::optional<int64_t>> dst = args.get_int_in_range("dst", 0, kMaxGpus - 1);
  conccl::Result<std::optional<int64_t>> engine_flag = args.get_int_in_range("engine", 0, kMaxEngineId);
  conccl::Result<std::optional<uint64_t>> bytes = args.get_size("bytes");
  for (const auto* r : {&src, &dst, &engine_flag})
    if (!r->ok()) return fail(args, ctx, r->status());
  if (!bytes.ok()) return fail(args, ctx, bytes.status());
  if (!*src || !*dst || !*bytes || **bytes == 0)
    return usage_error(args, ctx, "give --src GPU --dst GPU --bytes SIZE (SIZE > 0)");
  conccl::Result<uint64_t> seed = args.get_uint("seed", 1);
  if (!seed.ok()) return fail(args, ctx, seed.status());
  const std::string inject = args.value("inject").value_or("");
  if (!inject.empty() && inject != "stall" && inject != "lost-signal")
    return usage_error(args, ctx, "--inject takes stall or lost-signal");

  conccl::Result<std::unique_ptr<conccl::Device>> devr = open_device_from_args(args);
  if (!devr.ok()) return fail(args, ctx, devr.status());
  conccl::Device& dev = **devr;
  const int s = static_cast<int>(**src), d = static_cast<int>(**dst);  // in 0..kMaxGpus-1
  for (const auto& [flag, gpu] : {std::pair{"--src", s}, std::pair{"--dst", d}})
    if (gpu >= dev.gpu_count())
      return usage_error(args, ctx, std::string(flag) + " " + std::to_string(gpu) +
                                        " is out of range: the node has GPUs 0.." + std::to_string(dev.gpu_count() - 1));

  // Engine: as asked, else the one the topology recommends for src -> dst.
  const conccl::GpuInfo& g = dev.topology().gpus[static_cast<size_t>(s)];
  int engine = g.engines.empty() ? 0 : g.engines.back().id;
  if (const conccl::LinkInfo* l = g.link_to(d); l && !l->recommended_engines.empty()) engine = l->recommended_engines[0];
  if (*engine_flag) engine = static_cast<int>(**engine_flag);  // create_queue says which engines exist

  const uint64_t n = **bytes;
  MemBudget need;
  need.gpu.assign(static_cast<size_t>(dev.gpu_count()), 0);
  need.gpu[static_cast<size_t>(s)] = add_sat(need.gpu[static_cast<size_t>(s)], n);
  need.gpu[static_cast<size_t>(d)] = add_sat(need.gpu[static_cast<size_t>(d)], n);
  if (Status st = check_budget(need, dev.topology(), args.common().backend == Backend::emu,
                               "lower --bytes (now " + format_size(n) + ")", mem_available());
      !st.ok())
    return fail(args, ctx, st.prefix("copy of " + format_size(n)));
  conccl::Result<conccl::Buffer> a = dev.alloc(s, n, conccl::MemKind::device);
  if (!a.ok()) return fail(args, ctx, a.status());
  conccl::Result<conccl::Buffer> b = dev.alloc(d, n, conccl::MemKind::device);
  if (!b.ok()) return fail(args, ctx, b.status());
  if (!a->host || !b->host)
    return fail(args, ctx, conccl::error(Code::unavailable, "copy verification needs CPU-visible device memory"));
  random_fill(a->host, n, *seed);
  random_fill(b->host, n, *seed ^ 0x9E3779B97F4A7C15ull);  // different, so a missed copy shows

  conccl::Result<std::unique_ptr<conccl::Queue>> q = dev.create_queue(s, engine);
  if (!q.ok()) return fail(args, ctx, q.status());
  conccl::Result<conccl::Signal> sig = conccl::Signal::create(dev);
  if (!sig.ok()) return fail(args, ctx, sig.status());

  if (!inject.empty()) {
    auto* emu = dynamic_cast<conccl::emu::EmuDevice*>(&dev);
    if (!emu) return usage_error(args, ctx, "--inject works only with --backend emu");
    conccl::emu::Injection inj;
    if (inject == "stall") inj.stall = true;
    else inj.drop_completions = 2;  // both words of the signal update
    if (Status st = emu->inject(s, engine, inj); !st.ok()) return fail(args, ctx, st);
  }

  conccl::CommandBuffer cb = (*q)->command_buffer();
  Status st = cb.copy(b->va, a->va, n);
  if (st.ok()) st = sig->signal_add(cb, 1);
  // The host wake-up in the queue's own terms (SDMA TRAP, KFD mailbox + TRAP,
  // Hopper non-stall interrupt): never a packet of one ISA on another.
  if (st.ok()) st = (*q)->record_wake(cb);
  if (!st.ok()) return fail(args, ctx, st);

  const auto deadline = conccl::Deadline::after_ms(static_cast<int64_t>(args.common().timeout_ms));
  const auto t0 = std::chrono::steady_clock::now();
  conccl::QueueSpan span;
  if (st = (*q)->submit(cb, deadline, &span); !st.ok()) return fail(args, ctx, st);
  st = sig->wait(1, deadline, &span);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return fail(args, ctx, st);

  const bool ok = std::memcmp(a->host, b->host, n) == 0;
  const double gbps = static_cast<double>(n) / secs / 1e9;
  if (args.common().json) {
    std::fprintf(ctx.out,
                 "{\"bytes\": %" PRIu64 ", \"seconds\": %s, \"gbps\": %s, \"verified\": %s, \"src\": %d, "
                 "\"dst\": %d, \"engine\": %d}\n",
                 n, json_number(secs, 9).c_str(), json_number(gbps, 3).c_str(), ok ? "true" : "false", s, d, engine);
  } else {
    std::fprintf(ctx.out, "%-14s %-12s %-10s %s\n", "bytes", "time", "GB/s", "verified");
    std::fprintf(ctx.out, "%-14" PRIu64 " %-12s %-10.3f %s\n", n,
                 (std::to_string(secs * 1e6).substr(0, 9) + " us").c_str(), gbps, ok ? "yes" : "NO");
  }
  if (!ok) {
    size_t i = 0;
    while (i < n && a->as<uint8_t>()[i] == b->as<uint8_t>()[i]) ++i;
    std::fprintf(ctx.err, "sdma-probe copy: destination differs from source at byte %zu\n", i);
    return to_int(ExitCode::verify_failed);
  }
  return to_int(ExitCode::ok);
}

const Registration copy_reg({
    .name = "copy",
    .summary = "one copy of random data between GPUs, verified byte for byte",
    .usage = "sdma-probe copy [--backend B] [--preset P] --src GPU --dst GPU --bytes SIZE [--engine ID]\n"
             "                [--inject stall|lost-signal] [--timeout-ms N] [--json]",
    .details =
        "Copies SIZE bytes (K/M/G suffixes) of random data from GPU src's memory to GPU dst's\n"
        "on an engine of src (default: the engine the topology recommends for dst), completes\n"
        "with a signal, and verifies every byte. Prints bytes, time, GB/s and verified; --json\n"
        "prints {\"bytes\", \"seconds\", \"gbps\", \"verified\", \"src\", \"dst\", \"engine\"}.\n"
        "--inject (emulator) makes the engine stall, or drops the signal update, to show the\n"
        "hang diagnosis: exit 3 within --timeout-ms, with the diagnosis on stderr.\n",
    .flags = with_flags(device_flag_specs(), {
        {.name = "src", .value = "GPU", .help = "source GPU"},
        {.name = "dst", .value = "GPU", .help = "destination GPU"},
        {.name = "bytes", .value = "SIZE", .help = "bytes to copy (K/M/G suffixes)"},
        {.name = "engine", .value = "ID", .help = "engine of the source GPU"},
        {.name = "seed", .value = "N", .help = "random data seed (default 1)"},
        {.name = "inject", .value = "stall|lost-signal", .help = "emulator fault injection"},
    }),
    .run = run_copy,
    .order = 40,
});

}  // namespace
}  // namespace probe
