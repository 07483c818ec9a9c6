// tools/sdma-probe/cmd_asm.cpp - `sdma-probe asm` and `sdma-probe dis`: the text
// form of SDMA packets (docs/asm.md) to dwords and back.
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli.hpp"
#include "gen_flags.hpp"
#include "packets/hopper_ce.hpp"
#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"
#include "packets/sdma_dis.hpp"
#include "text_input.hpp"

namespace probe {
namespace {

namespace sdma = conccl::sdma;

// ---- asm --------------------------------------------------------------------

bool is_hopper(const Args& args) { return args.value("gen") == std::string(conccl::hopper::kGenName); }

// Assembles an input line by line (bounded memory: lines over kMaxLineBytes
// are refused), printing each packet's dwords; returns the number of bad lines.
template <typename AssembleLine>
int assemble_lines(const std::string& name, FILE* f, Context& ctx, AssembleLine assemble_line) {
  LineReader in(f);
  ErrorLines errors(ctx.err, name);
  std::string line;
  std::vector<uint32_t> dw;
  bool too_long = false;
  while (in.next(&line, &too_long)) {
    if (too_long) {
      std::fflush(ctx.out);
      errors.report(in.line_no(), "line longer than " + std::to_string(kMaxLineBytes) +
                                      " bytes: one packet per line (is this a binary file?)");
      continue;
    }
    dw.clear();
    bool produced = false;
    conccl::Status st = assemble_line(line, &dw, &produced);
    if (!st.ok()) {
      std::fflush(ctx.out);
      errors.report(in.line_no(), st.message());
    } else if (produced) {
      std::fprintf(ctx.out, "%s\n", sdma::format_dwords(dw).c_str());
    }
  }
  return errors.count();
}

// --gen hopper-ce: NVIDIA Hopper copy-engine pushbuffer methods (packets/hopper_ce.hpp).
int run_asm_hopper(const Args& args, Context& ctx) {
  if (args.has("list")) {
    std::fprintf(ctx.out, "%s", conccl::hopper::describe_methods().c_str());
    return to_int(ExitCode::ok);
  }
  int bad = 0;
  const int unopened = for_each_input(args, ctx, [&](const std::string& name, FILE* f) {
    bad += assemble_lines(name, f, ctx, [](const std::string& line, std::vector<uint32_t>* dw, bool* produced) {
      return conccl::hopper::assemble_line(line, dw, produced);
    });
  });
  return to_int(bad || unopened ? ExitCode::usage : ExitCode::ok);
}

int run_dis_hopper(const Args& args, Context& ctx) {
  int bad = 0;
  const int unopened = for_each_input(args, ctx, [&](const std::string& name, FILE* f) {
    conccl::Result<std::vector<uint32_t>> dw = sdma::parse_dwords(read_all(f));
    if (!dw.ok()) {
      std::fprintf(ctx.err, "%s: %s\n", name.c_str(), dw.status().message().c_str());
      ++bad;
      return;
    }
    conccl::hopper::Disassembly d = conccl::hopper::disassemble(*dw);
    for (const std::string& l : d.lines) std::fprintf(ctx.out, "%s\n", l.c_str());
    if (!d.error.ok()) {
      std::fflush(ctx.out);
      std::fprintf(ctx.err, "%s: dword offset %zu: %s\n", name.c_str(), d.error_offset, d.error.message().c_str());
      ++bad;
    }
  });
  return to_int(bad || unopened ? ExitCode::usage : ExitCode::ok);
}

int run_asm(const Args& args, Context& ctx) {
  if (int rc = refuse_json(args, ctx, "dwords as hex text"); rc >= 0) return rc;
  if (is_hopper(args)) return run_asm_hopper(args, ctx);
  conccl::Result<sdma::Gen> gen = gen_from_args(args);
  if (!gen.ok()) return fail(args, ctx, gen.status());

  if (args.has("list")) {
    if (!args.positionals().empty())
      return usage_error(args, ctx, "--list takes no input files");
    std::fprintf(ctx.out,
                 "SDMA %s packets (keys in [brackets] are optional, the rest required):\n%s",
                 std::string(sdma::gen_name(*gen)).c_str(), sdma::describe_packets(*gen).c_str());
    return to_int(ExitCode::ok);
  }

  int bad = 0;
  const int unopened = for_each_input(args, ctx, [&](const std::string& name, FILE* f) {
    bad += assemble_lines(name, f, ctx, [&](const std::string& line, std::vector<uint32_t>* dw, bool* produced) {
      return sdma::assemble_line(*gen, line, dw, produced);
    });
  });
  if (bad || unopened) {
    std::fflush(ctx.out);
    if (bad)
      std::fprintf(ctx.err, "sdma-probe asm: %d bad line%s, no dwords printed for %s\n", bad,
                   bad == 1 ? "" : "s", bad == 1 ? "it" : "them");
    return to_int(ExitCode::usage);
  }
  return to_int(ExitCode::ok);
}

const Registration asm_reg({
    .name = "asm",
    .summary = "assemble SDMA packets: one `op key=value ...` line in, one line of dwords out",
    .usage = "sdma-probe asm (--gen GEN | --gfx TARGET) [--list] [FILE...]",
    .details =
        "Reads FILEs (or stdin; '-' is stdin), one packet per line, and prints each\n"
        "packet's dwords as 8-digit lowercase hex words, one line per packet. Blank\n"
        "lines and '#' comments produce nothing. A bad line is reported on stderr as\n"
        "FILE:LINE: message, prints no dwords, and the rest is still assembled; the\n"
        "exit code is then 2. --list prints every op of the generation and its keys.\n"
        "--gen hopper-ce assembles NVIDIA Hopper copy-engine pushbuffer methods instead\n"
        "(docs/nv-backend.md; --list shows them).\n"
        "Syntax: docs/asm.md.\n"
        "\n"
        "example:\n"
        "  echo 'fence addr=0x7f0000400000 value=1' | sdma-probe asm --gen 4\n"
        "  00000005 00400000 00007f00 00000001\n",
    .flags = with_flags(gen_flag_specs(), {
        {.name = "list", .help = "print the generation's ops and their keys, then exit"},
    }),
    .run = run_asm,
    .order = 20,
});

// ---- dis --------------------------------------------------------------------

// "line 1: 'zz' is not ..." -> "'zz' is not ..." (we add FILE:LINE ourselves).
std::string strip_line_prefix(const std::string& msg) {
  const std::string p = "line 1: ";
  return msg.rfind(p, 0) == 0 ? msg.substr(p.size()) : msg;
}

// Disassembles one input as it is read, in bounded memory: a packet is
// printed as soon as its dwords are in, and only an unfinished packet's
// dwords are held. A bad line stops the printing (what follows cannot be
// trusted to line up), but the rest is still read so that every bad line is
// reported (up to kMaxErrorLines). Returns false when anything was bad.
bool dis_one(sdma::Gen g, const std::string& name, FILE* f, Context& ctx) {
  // Enough dwords to know any packet's length (its header and count fields).
  constexpr size_t kLengthKnownAfter = 16;
  LineReader in(f);
  ErrorLines errors(ctx.err, name);
  std::vector<uint32_t> pending;     // dwords not yet printed
  std::vector<size_t> pending_line;  // source line of each
  size_t offset = 0;                 // input dword offset of pending[0]
  bool printing = true;              // no bad line yet
  struct Failure {
    size_t line = 0, offset = 0, left = 0;
    std::string why;
  };
  std::optional<Failure> failed;  // the first undecodable packet
  // Prints the whole packets at the front of `pending`. At the end of the
  // input (`last`) what remains must decode too.
  auto drain = [&](bool last) {
    size_t at = 0;
    while (!failed && at < pending.size()) {
      const std::span<const uint32_t> rest(pending.data() + at, pending.size() - at);
      conccl::Result<size_t> len = sdma::packet_length(g, rest);
      const bool complete = len.ok() && *len <= rest.size();
      if (!complete && !last && (len.ok() || rest.size() < kLengthKnownAfter)) break;  // more to come
      conccl::Result<sdma::Packet> p = sdma::decode(g, complete ? rest.first(*len) : rest);
      if (!p.ok()) {
        failed = Failure{pending_line[at], offset + at, rest.size(), p.status().message()};
        break;
      }
      std::fprintf(ctx.out, "%s\n", sdma::disassemble_exact(g, rest.first(p->dwords), *p).c_str());
      at += p->dwords;
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(at));
    pending_line.erase(pending_line.begin(), pending_line.begin() + static_cast<std::ptrdiff_t>(at));
    offset += at;
    if (failed) {
      pending.clear();
      pending_line.clear();
    }
  };
  std::string line;
  bool too_long = false;
  while (in.next(&line, &too_long)) {
    if (too_long) {
      printing = false;
      errors.report(in.line_no(), "line longer than " + std::to_string(kMaxLineBytes) +
                                      " bytes (is this a binary file? dis reads hex dwords)");
      continue;
    }
    conccl::Result<std::vector<uint32_t>> dw = sdma::parse_dwords(line);
    if (!dw.ok()) {
      printing = false;
      std::fflush(ctx.out);
      errors.report(in.line_no(), strip_line_prefix(dw.status().message()));
      continue;
    }
    if (failed) {
      failed->left += dw->size();
      continue;
    }
    if (!printing) continue;
    pending.insert(pending.end(), dw->begin(), dw->end());
    pending_line.insert(pending_line.end(), dw->size(), in.line_no());
    drain(false);
  }
  if (printing) drain(true);
  std::fflush(ctx.out);
  if (failed)
    errors.report(failed->line, "dword offset " + std::to_string(failed->offset) + ": " + failed->why + " (" +
                                    std::to_string(failed->left) + " dword" + (failed->left == 1 ? "" : "s") +
                                    " not disassembled)");
  else if (!printing)
    errors.report(0, "disassembly stopped at the first bad line: fix the dwords above");
  return errors.count() == 0;
}

int run_dis(const Args& args, Context& ctx) {
  if (int rc = refuse_json(args, ctx, "packets in the asm syntax"); rc >= 0) return rc;
  if (is_hopper(args)) return run_dis_hopper(args, ctx);
  conccl::Result<sdma::Gen> gen = gen_from_args(args);
  if (!gen.ok()) return fail(args, ctx, gen.status());
  int bad = 0;
  const int unopened = for_each_input(args, ctx, [&](const std::string& name, FILE* f) {
    if (!dis_one(*gen, name, f, ctx)) ++bad;
  });
  return to_int(bad || unopened ? ExitCode::usage : ExitCode::ok);
}

const Registration dis_reg({
    .name = "dis",
    .summary = "disassemble SDMA dwords into one `op key=value ...` line per packet",
    .usage = "sdma-probe dis (--gen GEN | --gfx TARGET) [FILE...]",
    .details =
        "Reads hex dwords from FILEs (or stdin; '-' is stdin): whitespace separated,\n"
        "optional 0x prefix, '#' comments. Prints one packet per line in the syntax\n"
        "`sdma-probe asm` reads, so `dis | asm` gives back the same dwords. An unknown\n"
        "opcode or a truncated packet is reported on stderr with its dword offset\n"
        "(counted from the start of that input) after the packets before it are\n"
        "printed; the exit code is then 2.\n"
        "\n"
        "example:\n"
        "  echo 00000005 00400000 00007f00 00000001 | sdma-probe dis --gen 4\n"
        "  fence addr=0x7f0000400000 value=0x1\n",
    .flags = gen_flag_specs(),
    .run = run_dis,
    .order = 21,
});

}  // namespace
}  // namespace probe
