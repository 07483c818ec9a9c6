// tools/sdma-probe/cmd_exec.cpp - `sdma-probe exec`: run hand-written packets
// on one engine with named buffers, then dump memory. A bring-up tool that
// works the same on every backend (it only uses conccl::Device and Queue).
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
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

// A --buffer, checked before the device opens, so that usage errors report
// as such on every backend.
struct BufferDef {
  std::string name;
  uint64_t size;
  int gpu;  // -1 = host memory
};

// The command line, checked.
struct ExecFlags {
  int64_t gpu = 0, engine = 0;  // the queue's
  std::vector<BufferDef> defs;
};

Status usage(std::string message) { return conccl::error(Code::invalid_argument, std::move(message)); }

// --buffer NAME=SIZE[@GPU|@host]: on the queue's GPU unless @ says where.
conccl::Result<BufferDef> parse_buffer(const std::string& d, int queue_gpu) {
  const size_t eq = d.find('=');
  if (eq == std::string::npos || eq == 0) return usage("--buffer '" + d + "': expected NAME=SIZE[@GPU|@host]");
  BufferDef def{d.substr(0, eq), 0, queue_gpu};
  std::string size = d.substr(eq + 1);
  if (const size_t at = size.find('@'); at != std::string::npos) {
    const std::string where = size.substr(at + 1);
    size = size.substr(0, at);
    if (where == "host") def.gpu = -1;
    else if (std::optional<uint64_t> g = parse_uint(where); g && *g < uint64_t(kMaxGpus))
      def.gpu = static_cast<int>(*g);
    else return usage("--buffer '" + d + "': after '@' give a GPU index (0.." + std::to_string(kMaxGpus - 1) +
                      ") or 'host'");
  }
  std::optional<uint64_t> sz = parse_size(size);
  if (!sz || *sz == 0) return usage("--buffer '" + d + "': bad size '" + size + "'");
  for (char c : def.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return usage("--buffer '" + d + "': names are letters, digits and '_'");
  def.size = *sz;
  return def;
}

Status read_exec_flags(const Args& args, ExecFlags* f) {
  if (args.positionals().size() > 1) return usage("exec takes at most one packet FILE");
  conccl::Result<int64_t> gpu = args.get_int_in_range("gpu", 0, kMaxGpus - 1, 0);
  if (!gpu.ok()) return gpu.status();
  f->gpu = *gpu;
  conccl::Result<int64_t> engine = args.get_int_in_range("engine", 0, kMaxEngineId, 0);
  if (!engine.ok()) return engine.status();
  f->engine = *engine;
  for (const std::string& d : args.values("buffer")) {
    conccl::Result<BufferDef> def = parse_buffer(d, static_cast<int>(f->gpu));
    if (!def.ok()) return def.status();
    f->defs.push_back(*def);
  }
  return Status();
}

// The device, and the queue on --gpu's --engine.
Status open_queue(const Args& args, const ExecFlags& f, std::unique_ptr<conccl::Device>* dev,
                  std::unique_ptr<conccl::Queue>* q) {
  conccl::Result<std::unique_ptr<conccl::Device>> d = open_device_from_args(args);
  if (!d.ok()) return d.status();
  *dev = std::move(d).value();
  conccl::Device& device = **dev;
  if (f.gpu >= device.gpu_count())
    return usage("--gpu " + std::to_string(f.gpu) + " is out of range: the node has GPUs 0.." +
                 std::to_string(device.gpu_count() - 1));
  conccl::Result<std::unique_ptr<conccl::Queue>> queue =
      device.create_queue(static_cast<int>(f.gpu), static_cast<int>(f.engine));
  if (!queue.ok()) return queue.status();
  *q = std::move(queue).value();
  return Status();
}

// The buffers' GPUs exist, and the buffers fit: refused up front (on the
// emulator GPU memory is host memory).
Status check_buffer_budget(const Args& args, const conccl::Device& device, const std::vector<BufferDef>& defs) {
  MemBudget need;
  need.gpu.assign(static_cast<size_t>(device.gpu_count()), 0);
  for (const BufferDef& d : defs) {
    if (d.gpu >= device.gpu_count())
      return usage("buffer '" + d.name + "' is on GPU " + std::to_string(d.gpu) + ", but the node has GPUs 0.." +
                   std::to_string(device.gpu_count() - 1));
    uint64_t& slot = d.gpu < 0 ? need.host : need.gpu[static_cast<size_t>(d.gpu)];
    slot = add_sat(slot, d.size);
  }
  if (Status st = check_budget(need, device.topology(), args.common().backend == Backend::emu,
                               "give smaller --buffer sizes", mem_available());
      !st.ok())
    return st.prefix("the --buffer definitions");
  return Status();
}

Status alloc_buffers(conccl::Device& device, const std::vector<BufferDef>& defs, std::map<std::string, Named>* bufs) {
  for (const BufferDef& d : defs) {
    if (bufs->count(d.name)) return usage("buffer '" + d.name + "' defined twice");
    conccl::Result<Buffer> b = device.alloc(d.gpu, d.size, d.gpu < 0 ? conccl::MemKind::host : conccl::MemKind::device);
    if (!b.ok()) return b.status();
    (*bufs)[d.name] = Named{*b};
  }
  return Status();
}

// --fill NAME=VALUE: every dword of the buffer, through its CPU mapping.
Status fill_buffers(const Args& args, std::map<std::string, Named>& bufs) {
  for (const std::string& f : args.values("fill")) {
    const size_t eq = f.find('=');
    const std::string name = f.substr(0, eq);
    auto it = bufs.find(name);
    std::optional<uint64_t> v = eq == std::string::npos ? std::nullopt : parse_uint(f.substr(eq + 1));
    if (it == bufs.end() || !v || *v > 0xFFFFFFFFu)
      return usage("--fill '" + f + "': expected NAME=VALUE (32-bit) for a defined buffer");
    if (!it->second.buf.host) return conccl::error(Code::unavailable, "buffer " + name + " is not CPU-visible here");
    auto* p = it->second.buf.as<uint32_t>();
    for (size_t i = 0; i < it->second.buf.size / 4; ++i) p[i] = static_cast<uint32_t>(*v);
  }
  return Status();
}

// Assembles FILE or stdin for the queue's generation into *dw. Every bad
// line is reported (FILE:LINE: message), not only the first; false when
// there was one, or the file could not be opened.
bool assemble_input(const Args& args, Context& ctx, const conccl::Queue& q, const std::map<std::string, Named>& bufs,
                    std::vector<uint32_t>* dw) {
  int bad = 0;
  const int unopened = for_each_input(args, ctx, [&](const std::string& name, FILE* f) {
    std::string line;
    for (size_t n = 1; read_line(f, &line); ++n) {
      conccl::Result<std::string> sub = substitute(line, bufs);
      Status st = sub.ok() ? conccl::sdma::assemble_line(q.gen(), *sub, dw) : sub.status();
      if (!st.ok()) {
        std::fprintf(ctx.err, "%s:%zu: %s\n", name.c_str(), n, st.message().c_str());
        ++bad;
      }
    }
  });
  return !bad && !unopened;
}

// Submits the packets and waits until the engine has consumed them.
Status run_packets(conccl::Queue& q, const std::vector<uint32_t>& dw, uint64_t timeout_ms) {
  conccl::CommandBuffer cb = q.command_buffer();
  CONCCL_RETURN_IF_ERROR(cb.raw(dw));
  const auto deadline = conccl::Deadline::after_ms(static_cast<int64_t>(timeout_ms));
  CONCCL_RETURN_IF_ERROR(q.submit(cb, deadline));
  return q.wait_done(deadline);
}

// --dump NAME[+OFF]:BYTES, each as `NAME+OFF: ` and the dwords, in order:
// the dumps before a bad one are printed.
Status dump_buffers(const Args& args, Context& ctx, const std::map<std::string, Named>& bufs) {
  for (const std::string& d : args.values("dump")) {
    const size_t colon = d.rfind(':');
    std::string what = d.substr(0, colon);
    uint64_t off = 0;
    if (const size_t plus = what.find('+'); plus != std::string::npos) {
      std::optional<uint64_t> o = parse_size(what.substr(plus + 1));
      if (!o) return usage("--dump '" + d + "': bad offset");
      off = *o;
      what = what.substr(0, plus);
    }
    auto it = bufs.find(what);
    std::optional<uint64_t> n = colon == std::string::npos ? std::nullopt : parse_size(d.substr(colon + 1));
    if (it == bufs.end() || !n || *n == 0 || *n % 4 || off % 4)
      return usage("--dump '" + d + "': expected NAME[+OFF]:BYTES with a defined buffer and 4-byte multiples");
    if (*n > it->second.buf.size || off > it->second.buf.size - *n)  // no wrap for huge OFF
      return usage("--dump '" + d + "' reads past the end of " + what);
    if (!it->second.buf.host) return conccl::error(Code::unavailable, "buffer " + what + " is not CPU-visible here");
    const auto* p = reinterpret_cast<const uint32_t*>(it->second.buf.as<const uint8_t>() + off);
    std::fprintf(ctx.out, "%s+%" PRIu64 ": %s\n", what.c_str(), off,
                 conccl::sdma::format_dwords(std::span<const uint32_t>(p, *n / 4)).c_str());
  }
  return Status();
}

int run_exec(const Args& args, Context& ctx) {
  if (int rc = refuse_json(args, ctx, "memory dumps as hex text"); rc >= 0) return rc;
  ExecFlags f;
  if (Status st = read_exec_flags(args, &f); !st.ok()) return fail(args, ctx, st);
  // Declared in this order, the queue goes before its device.
  std::unique_ptr<conccl::Device> dev;
  std::unique_ptr<conccl::Queue> q;
  if (Status st = open_queue(args, f, &dev, &q); !st.ok()) return fail(args, ctx, st);
  if (Status st = check_buffer_budget(args, *dev, f.defs); !st.ok()) return fail(args, ctx, st);
  std::map<std::string, Named> bufs;
  if (Status st = alloc_buffers(*dev, f.defs, &bufs); !st.ok()) return fail(args, ctx, st);
  if (Status st = fill_buffers(args, bufs); !st.ok()) return fail(args, ctx, st);
  std::vector<uint32_t> dw;
  if (!assemble_input(args, ctx, *q, bufs, &dw)) return to_int(ExitCode::usage);
  if (Status st = run_packets(*q, dw, args.common().timeout_ms); !st.ok()) return fail(args, ctx, st);
  if (Status st = dump_buffers(args, ctx, bufs); !st.ok()) return fail(args, ctx, st);
  for (auto& [name, b] : bufs) (void)dev->free(b.buf);
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
    .flags = with_flags(device_flag_specs(), {
        {.name = "gpu", .value = "G", .help = "GPU of the queue (default 0)"},
        {.name = "engine", .value = "E", .help = "engine of the queue (default 0)"},
        {.name = "buffer", .value = "NAME=SIZE[@GPU|@host]", .help = "allocate a named buffer", .repeatable = true},
        {.name = "fill", .value = "NAME=VALUE", .help = "fill a buffer with a 32-bit value", .repeatable = true},
        {.name = "dump", .value = "NAME[+OFF]:BYTES", .help = "print dwords after the run", .repeatable = true},
    }),
    .run = run_exec,
    .order = 30,
});

}  // namespace
}  // namespace probe
