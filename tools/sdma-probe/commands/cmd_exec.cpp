// tools/sdma-probe/cmd_exec.cpp - `sdma-probe exec`: run hand-written packets
// on one engine with named buffers, then dump memory. A bring-up tool that
// works the same on every backend (it only uses conccl::Device and Queue).
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "conccl/queue.hpp"
#include "device_flags.hpp"
#include "mem_budget.hpp"
#include "packets/sdma_asm.hpp"

namespace probe {
namespace {

using conccl::Buffer;
using conccl::Code;
using conccl::Status;
using conccl::hex;

struct Named {
  Buffer buf;
};

// "$NAME" / "$NAME+OFF" -> the buffer's address (+ offset).
conccl::Result<std::string> substitute(const std::string& line, const std::map<std::string, Named>& bufs) {
  std::string out;
  for (size_t i = 0; i < line.size();) {
    if (line[i] != '$') {
      out += line[i++];
      continue;
    }
    size_t j = i + 1;
    while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_')) ++j;
    const std::string name = line.substr(i + 1, j - i - 1);
    auto it = bufs.find(name);
    if (name.empty() || it == bufs.end())
      return conccl::error(Code::invalid_argument, "unknown buffer '$" + name + "' (define it with --buffer " +
                                                      (name.empty() ? "NAME" : name) + "=SIZE)");
    uint64_t off = 0;
    if (j < line.size() && line[j] == '+') {
      size_t k = j + 1;
      while (k < line.size() && std::isalnum(static_cast<unsigned char>(line[k]))) ++k;
      std::optional<uint64_t> o = parse_size(line.substr(j + 1, k - j - 1));
      if (!o) return conccl::error(Code::invalid_argument, "bad offset after '$" + name + "+'");
      off = *o;
      j = k;
    }
    if (off > it->second.buf.size)
      return conccl::error(Code::out_of_range, "$" + name + "+" + std::to_string(off) + " is past the end of " +
                                                   name + " (" + std::to_string(it->second.buf.size) + " bytes)");
    out += hex(it->second.buf.va + off);
    i = j;
  }
  return out;
}

int run_exec(const Args& args, Context& ctx) {
  if (int rc = refuse_json(args, ctx, "memory dumps as hex text"); rc >= 0) return rc;
  if (args.positionals().size() > 1) return usage_error(args, ctx, "exec takes at most one packet FILE");
  conccl::Result<int64_t> gpu = args.get_int_in_range("gpu", 0, kMaxGpus - 1, 0);
  if (!gpu.ok()) return fail(args, ctx, gpu.status());
  conccl::Result<int64_t> engine = args.get_int_in_range("engine", 0, kMaxEngineId, 0);
  if (!engine.ok()) return fail(args, ctx, engine.status());

  // Buffer definitions are checked before the device opens, so usage errors
  // report as such on every backend.
  struct Def {
    std::string name;
    uint64_t size;
    int gpu;  // -1 = host memory
  };
  std::vector<Def> defs;
  for (const std::string& d : args.values("buffer")) {
    const size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      return usage_error(args, ctx, "--buffer '" + d + "': expected NAME=SIZE[@GPU|@host]");
    Def def{d.substr(0, eq), 0, static_cast<int>(*gpu)};
    std::string size = d.substr(eq + 1);
    if (const size_t at = size.find('@'); at != std::string::npos) {
      const std::string where = size.substr(at + 1);
      size = size.substr(0, at);
      if (where == "host") def.gpu = -1;
      else if (std::optional<uint64_t> g = parse_uint(where); g && *g < uint64_t(kMaxGpus)) def.gpu = static_cast<int>(*g);
      else return usage_error(args, ctx, "--buffer '" + d + "': after '@' give a GPU index (0.." +
                                             std::to_string(kMaxGpus - 1) + ") or 'host'");
    }
    std::optional<uint64_t> sz = parse_size(size);
    if (!sz || *sz == 0) return usage_error(args, ctx, "--buffer '" + d + "': bad size '" + size + "'");
    for (char c : def.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
        return usage_error(args, ctx, "--buffer '" + d + "': names are letters, digits and '_'");
    def.size = *sz;
    defs.push_back(def);
  }

  conccl::Result<std::unique_ptr<conccl::Device>> dev = open_device_from_args(args);
  if (!dev.ok()) return fail(args, ctx, dev.status());
  conccl::Device& device = **dev;
  if (*gpu >= device.gpu_count())
    return usage_error(args, ctx, "--gpu " + std::to_string(*gpu) + " is out of range: the node has GPUs 0.." +
                                      std::to_string(device.gpu_count() - 1));
  conccl::Result<std::unique_ptr<conccl::Queue>> q =
      device.create_queue(static_cast<int>(*gpu), static_cast<int>(*engine));
  if (!q.ok()) return fail(args, ctx, q.status());

  MemBudget need;
  need.gpu.assign(static_cast<size_t>(device.gpu_count()), 0);
  for (const Def& d : defs) {
    if (d.gpu >= device.gpu_count())
      return usage_error(args, ctx, "buffer '" + d.name + "' is on GPU " + std::to_string(d.gpu) +
                                        ", but the node has GPUs 0.." + std::to_string(device.gpu_count() - 1));
    uint64_t& slot = d.gpu < 0 ? need.host : need.gpu[static_cast<size_t>(d.gpu)];
    slot = add_sat(slot, d.size);
  }
  if (Status st = check_budget(need, device.topology(), args.common().backend == Backend::emu,
                               "give smaller --buffer sizes", mem_available());
      !st.ok())
    return fail(args, ctx, st.prefix("the --buffer definitions"));

  std::map<std::string, Named> bufs;
  for (const Def& d : defs) {
    if (bufs.count(d.name)) return usage_error(args, ctx, "buffer '" + d.name + "' defined twice");
    conccl::Result<Buffer> b =
        device.alloc(d.gpu, d.size, d.gpu < 0 ? conccl::MemKind::host : conccl::MemKind::device);
    if (!b.ok()) return fail(args, ctx, b.status());
    bufs[d.name] = Named{*b};
  }
  for (const std::string& f : args.values("fill")) {
    const size_t eq = f.find('=');
    const std::string name = f.substr(0, eq);
    auto it = bufs.find(name);
    std::optional<uint64_t> v = eq == std::string::npos ? std::nullopt : parse_uint(f.substr(eq + 1));
    if (it == bufs.end() || !v || *v > 0xFFFFFFFFu)
      return usage_error(args, ctx, "--fill '" + f + "': expected NAME=VALUE (32-bit) for a defined buffer");
    if (!it->second.buf.host)
      return fail(args, ctx, conccl::error(Code::unavailable, "buffer " + name + " is not CPU-visible here"));
    auto* p = it->second.buf.as<uint32_t>();
    for (size_t i = 0; i < it->second.buf.size / 4; ++i) p[i] = static_cast<uint32_t>(*v);
  }

  // Assemble for the queue's generation.
  std::vector<uint32_t> dw;
  int bad = 0;
  const int unopened = for_each_input(args, ctx, [&](const std::string& name, FILE* f) {
    std::string line;
    for (size_t n = 1; read_line(f, &line); ++n) {
      conccl::Result<std::string> sub = substitute(line, bufs);
      Status st = sub.ok() ? conccl::sdma::assemble_line(q.value()->gen(), *sub, &dw) : sub.status();
      if (!st.ok()) {
        std::fprintf(ctx.err, "%s:%zu: %s\n", name.c_str(), n, st.message().c_str());
        ++bad;
      }
    }
  });
  if (bad || unopened) return to_int(ExitCode::usage);

  conccl::CommandBuffer cb = (*q)->command_buffer();
  if (Status st = cb.raw(dw); !st.ok()) return fail(args, ctx, st);
  const auto deadline = conccl::Deadline::after_ms(static_cast<int64_t>(args.common().timeout_ms));
  if (Status st = (*q)->submit(cb, deadline); !st.ok()) return fail(args, ctx, st);
  if (Status st = (*q)->wait_done(deadline); !st.ok()) return fail(args, ctx, st);

  for (const std::string& d : args.values("dump")) {
    const size_t colon = d.rfind(':');
    std::string what = d.substr(0, colon);
    uint64_t off = 0;
    if (const size_t plus = what.find('+'); plus != std::string::npos) {
      std::optional<uint64_t> o = parse_size(what.substr(plus + 1));
      if (!o) return usage_error(args, ctx, "--dump '" + d + "': bad offset");
      off = *o;
      what = what.substr(0, plus);
    }
    auto it = bufs.find(what);
    std::optional<uint64_t> n = colon == std::string::npos ? std::nullopt : parse_size(d.substr(colon + 1));
    if (it == bufs.end() || !n || *n == 0 || *n % 4 || off % 4)
      return usage_error(args, ctx, "--dump '" + d + "': expected NAME[+OFF]:BYTES with a defined buffer and "
                                                      "4-byte multiples");
    if (*n > it->second.buf.size || off > it->second.buf.size - *n)  // no wrap for huge OFF
      return usage_error(args, ctx, "--dump '" + d + "' reads past the end of " + what);
    if (!it->second.buf.host)
      return fail(args, ctx, conccl::error(Code::unavailable, "buffer " + what + " is not CPU-visible here"));
    const auto* p = reinterpret_cast<const uint32_t*>(it->second.buf.as<const uint8_t>() + off);
    std::fprintf(ctx.out, "%s+%" PRIu64 ": %s\n", what.c_str(), off,
                 conccl::sdma::format_dwords(std::span<const uint32_t>(p, *n / 4)).c_str());
  }
  for (auto& [name, b] : bufs) (void)device.free(b.buf);
  return to_int(ExitCode::ok);
}

const Registration exec_reg({
    .name = "exec",
    .summary = "run hand-written packets on one engine with named buffers, then dump memory",
    .usage = "sdma-probe exec [--backend B] [--preset P] [--gpu G] [--engine E] [--buffer NAME=SIZE[@GPU|@host]]...\n"
             "                [--fill NAME=0xVALUE]... [--dump NAME[+OFF]:BYTES]... [--timeout-ms N] [FILE]",
    .details =
        "Allocates the named buffers (zeroed; in the queue's GPU memory unless @GPU or @host),\n"
        "fills them with a 32-bit value where asked, assembles FILE or stdin (the asm syntax,\n"
        "docs/asm.md, for the queue's SDMA generation) with $NAME and $NAME+OFF replaced by\n"
        "buffer addresses, submits it on the engine's queue, waits until the engine has\n"
        "consumed it, and prints each dump as `NAME+OFF: ` and the dwords in hex.\n"
        "Exit 0 when drained; 3 on timeout (with the hang diagnosis); 4 on an engine fault.\n"
        "\n"
        "example:\n"
        "  echo 'copy src=$a dst=$b bytes=64' | sdma-probe exec --buffer a=4K --buffer b=4K \\\n"
        "      --fill a=0xdeadbeef --dump b:16\n"
        "  b+0: deadbeef deadbeef deadbeef deadbeef\n",
    .flags = [] {
      std::vector<FlagSpec> f = device_flag_specs();
      f.push_back({.name = "gpu", .value = "G", .help = "GPU of the queue (default 0)"});
      f.push_back({.name = "engine", .value = "E", .help = "engine of the queue (default 0)"});
      f.push_back({.name = "buffer", .value = "NAME=SIZE[@GPU|@host]", .help = "allocate a named buffer", .repeatable = true});
      f.push_back({.name = "fill", .value = "NAME=VALUE", .help = "fill a buffer with a 32-bit value", .repeatable = true});
      f.push_back({.name = "dump", .value = "NAME[+OFF]:BYTES", .help = "print dwords after the run", .repeatable = true});
      return f;
    }(),
    .run = run_exec,
    .order = 30,
});

}  // namespace
}  // namespace probe
