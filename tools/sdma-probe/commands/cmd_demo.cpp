// tools/sdma-probe/cmd_demo.cpp - `sdma-probe demo`: assemble a realistic DMA
// command, disassemble it, and check that the text round-trips.
//
// (To be replaced by an all-gather on the emulated node once queues land.)
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "gen_flags.hpp"
#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"

namespace probe {
namespace {

namespace sdma = conccl::sdma;

// What a queue on one SDMA engine carries for one "copy when ready, then
// signal" command (the order ROCr's BlitSdma uses: waits, timestamp, copies,
// timestamp, completion signal, event + interrupt).
constexpr std::string_view kDemo = R"(# ConCCL demo: one DMA command as a queue on one SDMA engine carries it.
# 1. Wait until the producer's 32-bit signal word is >= 1 (func 5), retrying forever.
poll addr=0x00007F0000500000 ref=1 mask=0xffffffff func=5 interval=4 retry=0xfff
# 2. Start timestamp: the global clock into an 8-byte aligned slot.
timestamp addr=0x00007F0000700000
# 3. Copy 1 MiB from the local buffer to the peer's buffer ...
copy src=0x00007F0000001000 dst=0x00007F0000200000 bytes=0x100000
# 4. ... and a 4 KiB header next to it.
copy src=0x00007F0000101000 dst=0x00007F0000300000 bytes=4096
# 5. End timestamp.
timestamp addr=0x00007F0000700008
# 6. Publish sequence number 1 for host pollers.
fence addr=0x00007F0000400000 value=1
# 7. Completion: the 64-bit signal counts down by one (add -1).
atomic_add64 addr=0x00007F0000600000 value=-1
# 8. Wake sleeping waiters: event id into the mailbox, then the interrupt.
fence addr=0x00007F0000410000 value=0x1234
trap ctx=0x1234
)";

int run_demo(const Args& args, Context& ctx) {
  if (int rc = refuse_json(args, ctx, "an annotated walk-through"); rc >= 0) return rc;
  conccl::Result<sdma::Gen> gen = gen_from_args(args, sdma::Gen::v4_4_2);
  if (!gen.ok()) return fail(args, ctx, gen.status());
  const sdma::Gen g = *gen;
  const std::string gname(sdma::gen_name(g));

  std::fprintf(ctx.out, "== source (SDMA %s) ==\n%.*s\n", gname.c_str(), int(kDemo.size()),
               kDemo.data());

  // Assemble line by line so each packet's dwords can be shown with its offset.
  std::vector<uint32_t> stream;
  std::vector<std::pair<size_t, size_t>> packets;  // offset, length
  std::string_view text = kDemo;
  for (size_t line_no = 1; !text.empty(); ++line_no) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const size_t before = stream.size();
    bool produced = false;
    conccl::Status st = sdma::assemble_line(g, line, &stream, &produced);
    if (!st.ok())
      return fail(args, ctx, st.prefix("demo line " + std::to_string(line_no)));
    if (produced) packets.emplace_back(before, stream.size() - before);
  }
  std::fprintf(ctx.out, "== dwords (%zu packets, %zu dwords; each line starts with its dword offset) ==\n",
               packets.size(), stream.size());
  for (const auto& [off, n] : packets)
    std::fprintf(ctx.out, "%4zu: %s\n", off,
                 sdma::format_dwords(std::span<const uint32_t>(stream).subspan(off, n)).c_str());

  // Disassemble the whole stream, then assemble the disassembly again.
  sdma::StreamDecode d = sdma::decode_stream(g, stream);
  std::fprintf(ctx.out, "\n== disassembly ==\n");
  std::string dis;
  for (size_t i = 0; i < d.packets.size(); ++i) {
    const std::string line = sdma::format_packet(d.packets[i]);
    std::fprintf(ctx.out, "%4zu: %s\n", d.offsets[i], line.c_str());
    dis += line + "\n";
  }
  if (!d.error.ok()) {
    std::fflush(ctx.out);
    std::fprintf(ctx.err, "sdma-probe demo: FAILED: the stream does not disassemble at dword %zu: %s\n",
                 d.error_offset, d.error.message().c_str());
    return to_int(ExitCode::verify_failed);
  }
  conccl::Result<std::vector<uint32_t>> again = sdma::assemble(g, dis);
  std::fprintf(ctx.out, "\n== round trip ==\n");
  if (!again.ok()) {
    std::fflush(ctx.out);
    std::fprintf(ctx.err, "sdma-probe demo: FAILED: the disassembly does not assemble: %s\n",
                 again.status().message().c_str());
    return to_int(ExitCode::verify_failed);
  }
  if (*again != stream) {
    size_t i = 0;
    while (i < again->size() && i < stream.size() && (*again)[i] == stream[i]) ++i;
    std::fflush(ctx.out);
    std::fprintf(ctx.err,
                 "sdma-probe demo: FAILED: the disassembly assembles to %zu dwords that differ "
                 "from the original %zu at dword %zu\n",
                 again->size(), stream.size(), i);
    return to_int(ExitCode::verify_failed);
  }
  std::fprintf(ctx.out,
               "OK: %zu packets disassemble and re-assemble to the same %zu dwords.\n"
               "next: sdma-probe asm --list --gen %s   (every op and its keys)\n"
               "      sdma-probe gfx                   (which generation your GPU uses)\n",
               packets.size(), stream.size(), gname.c_str());
  return to_int(ExitCode::ok);
}

const Registration demo_reg({
    .name = "demo",
    .summary = "assemble a sample DMA command, disassemble it, check the round trip",
    .usage = "sdma-probe demo [--gen GEN | --gfx TARGET]",
    .details =
        "Assembles a realistic packet stream (wait on a signal, timestamps, two copies,\n"
        "fences, a 64-bit atomic completion, an interrupt) for SDMA 4.4.2 (MI300) or\n"
        "the given generation, prints the source, the dwords and the disassembly, and\n"
        "checks that the disassembly assembles to the same dwords (exit 1 if not).\n",
    .flags = gen_flag_specs(),
    .run = run_demo,
    .order = 1,
});

}  // namespace
}  // namespace probe
