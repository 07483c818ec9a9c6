// tests/cli/test_cli.cpp - sdma-probe end to end: the binary is run with
// fork+exec, stdin fed from a file, stdout/stderr captured, exit code checked.
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "json_check.hpp"
#include "probe_runner.hpp"

namespace {

using namespace probe_test;

const std::vector<std::string> kAllGens = {"4", "4.4.2", "5", "5.2", "6", "7"};

// ---------------------------------------------------------------------------
// Framework: dispatch, help, shared flags, exit codes

TEST(CliFramework, HelpListsEveryCommandAndExitCodes) {
  Outcome r = probe({"--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* cmd : {"asm", "dis", "gfx", "demo"}) EXPECT_TRUE(contains(r.out, cmd)) << cmd;
  for (const char* flag : {"--backend", "--preset", "--json", "--timeout-ms"})
    EXPECT_TRUE(contains(r.out, flag)) << flag;
  EXPECT_TRUE(contains(r.out, "exit codes"));
  EXPECT_EQ(probe({"help"}).rc, 0);
  EXPECT_EQ(probe({"-h"}).rc, 0);
}

TEST(CliFramework, NoCommandIsAUsageError) {
  Outcome r = probe({});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "usage"));
  EXPECT_TRUE(r.out.empty());
}

TEST(CliFramework, UnknownCommandListsTheCommands) {
  Outcome r = probe({"frobnicate"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "unknown command 'frobnicate'"));
  for (const char* cmd : {"asm", "dis", "gfx", "demo"}) EXPECT_TRUE(contains(r.err, cmd)) << cmd;
  EXPECT_TRUE(r.out.empty());
}

TEST(CliFramework, HelpForOneCommand) {
  Outcome r = probe({"help", "asm"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_TRUE(contains(r.out, "usage: sdma-probe asm"));
  EXPECT_TRUE(contains(r.out, "--gen"));
  EXPECT_TRUE(contains(r.out, "--gfx"));
  EXPECT_EQ(probe({"asm", "--help"}).out, r.out);
  EXPECT_EQ(probe({"dis", "-h"}).rc, 0);

  Outcome bad = probe({"help", "nope"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(contains(bad.err, "unknown command 'nope'"));
}

TEST(CliFramework, UnknownFlagIsAUsageError) {
  Outcome r = probe({"asm", "--gen", "4", "--frob"}, "trap\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "unknown flag --frob"));
  EXPECT_TRUE(r.out.empty());
  EXPECT_EQ(probe({"asm", "-x", "--gen", "4"}).rc, 2);
  EXPECT_EQ(probe({"--frob", "asm"}).rc, 2);
}

TEST(CliFramework, FlagValueForms) {
  // --flag value, --flag=value, and shared flags before the command.
  const std::string want = "00000006 00000000\n";
  EXPECT_EQ(probe({"asm", "--gen", "4"}, "trap\n").out, want);
  EXPECT_EQ(probe({"asm", "--gen=4"}, "trap\n").out, want);
  Outcome r = probe({"asm", "--gen"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--gen needs a value"));
  r = probe({"asm", "--gen", "4", "--gen", "5"}, "trap\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--gen given more than once"));
  r = probe({"asm", "--gen", "4", "--list=yes"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--list takes no value"));
}

TEST(CliFramework, SharedFlagsAreAcceptedEverywhere) {
  Outcome r = probe({"--backend", "kfd", "--timeout-ms=250", "asm", "--preset", "mi300x", "--gen", "4"},
                "trap ctx=0x1234\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "00000006 00001234\n");
  // --json is honoured or refused, never ignored: text-only commands refuse it.
  for (const char* cmd : {"asm", "dis", "exec", "demo"}) {
    Outcome j = probe({cmd, "--json", "--gen", "4"}, "nop\n");
    if (std::string(cmd) == "exec") j = probe({cmd, "--json"}, "nop\n");
    EXPECT_EQ(j.rc, 2) << cmd << ": " << j.err;
    EXPECT_TRUE(contains(j.err, "not JSON; drop --json")) << cmd << ": " << j.err;
  }
  for (const char* b : {"emu", "kfd", "nv"})
    EXPECT_EQ(probe({"gfx", "--backend", b}).rc, 0) << b;
}

TEST(CliFramework, BadSharedFlagValues) {
  Outcome r = probe({"gfx", "--backend", "cuda"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--backend 'cuda' is not one of emu, kfd, nv"));
  r = probe({"gfx", "--timeout-ms", "soon"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--timeout-ms"));
  EXPECT_EQ(probe({"gfx", "--timeout-ms", "-5"}).rc, 2);
}

TEST(CliFramework, DoubleDashEndsFlags) {
  const std::string path = write_file("-dash.txt", "trap\n");
  Outcome r = probe({"asm", "--gen", "4", "--", path});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "00000006 00000000\n");
}

TEST(CliFramework, Version) {
  Outcome r = probe({"--version"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_TRUE(contains(r.out, "sdma-probe"));
}

// ---------------------------------------------------------------------------
// asm: the reference vectors (from the Linux amdgpu SDMA packet headers)

struct Vector {
  const char* line;
  const char* dwords;
  std::vector<std::string> gens;
};

const std::vector<Vector> kVectors = {
    {"copy src=0x00007F0000001000 dst=0x00007F0000200000 bytes=4096",
     "00000001 00000fff 00000000 00001000 00007f00 00200000 00007f00", kAllGens},
    {"atomic_add64 addr=0x00007F0000600000 value=-1",
     "5e00000a 00600000 00007f00 ffffffff ffffffff 00000000 00000000 00000000", kAllGens},
    {"poll addr=0x00007F0000500000 ref=7 mask=0xffffffff func=5 interval=4 retry=0xfff",
     "d0000008 00500000 00007f00 00000007 ffffffff 0fff0004", kAllGens},
    {"poll addr=0x00007F0000500000 ref=0 mask=0xffffffff func=3 interval=4 retry=0xfff",
     "b0000008 00500000 00007f00 00000000 ffffffff 0fff0004", kAllGens},
    {"fence addr=0x00007F0000400000 value=1", "00000005 00400000 00007f00 00000001", kAllGens},
    {"fence addr=0x00007F0000400000 value=1 mtype=3", "00030005 00400000 00007f00 00000001",
     {"5", "5.2", "6"}},
    {"timestamp addr=0x00007F0000700000", "0000020d 00700000 00007f00", kAllGens},
    {"trap ctx=0x1234", "00000006 00001234", kAllGens},
    {"nop count=3", "00030000 00000000 00000000 00000000", kAllGens},
    {"nop", "00000000", kAllGens},
    {"fill dst=0x00007F0000200000 value=0xDEADBEEF bytes=4096",
     "8000000b 00200000 00007f00 deadbeef 00000fff", kAllGens},
    {"fill8 dst=0x00007F0000200000 value=0xDEADBEEF bytes=4096",
     "0000000b 00200000 00007f00 deadbeef 00000fff", kAllGens},
    {"write dst=0x00007F0000300000 data=0x11111111,0x22222222",
     "00000002 00300000 00007f00 00000001 11111111 22222222", kAllGens},
    {"copy_bcst src=0x7F0000001000 dst0=0x7F0000200000 dst1=0x7F0000400000 bytes=4096",
     "08000001 00000fff 00000000 00001000 00007f00 00200000 00007f00 00400000 00007f00",
     kAllGens},
    {"cond_exe addr=0x00007F0000800000 ref=1 count=7",
     "00000009 00800000 00007f00 00000001 00000007", kAllGens},
    {"ib addr=0x00007F0000900000 size=64", "00000004 00900000 00007f00 00000040 00000000 00000000",
     kAllGens},
    {"reg_write reg=0x1234 value=0xCAFEBABE byte_en=0xf", "f000000e 00001234 cafebabe",
     {"4", "4.4.2", "5", "5.2", "6"}},
    {"reg_write reg=0x1234 value=0xCAFEBABE", "0000000e 000048d0 cafebabe", {"7"}},
    {"mem_incr addr=0x00007F0000A00000", "00000107 00a00000 00007f00", {"5", "5.2", "6", "7"}},
    {"gcr_user control=0xC3C0", "00000111 00000000 c3c00000 00000000 00000000",
     {"5", "5.2", "6", "7"}},
    {"gcr control=0xC3A1", "00000011 00000000 c3a10000 00000000 00000000", {"5", "5.2", "6", "7"}},
    {"copy src=0 dst=0 bytes=0x3FFFFF00", "00000001 3ffffeff 00000000 00000000 00000000 00000000 00000000",
     {"5.2", "6", "7"}},
    {"copy_window src=0x7F0000001000 src_x=16 src_y=2 src_pitch=256 dst=0x7F0000200000 "
     "dst_pitch=128 rect_x=64 rect_y=64 elementsize=2",
     "40000401 00001000 00007f00 00020010 001fe000 00000000 00200000 00007f00 00000000 000fe000 "
     "00000000 003f003f 00000000",
     {"4", "4.4.2", "5", "5.2", "6"}},
    {"copy_window src=0x7F0000001000 src_x=16 src_y=2 src_pitch=256 dst=0x7F0000200000 "
     "dst_pitch=128 rect_x=64 rect_y=64 elementsize=2",
     "40000401 00001000 00007f00 00020010 00ff0000 00000000 00200000 00007f00 00000000 007f0000 "
     "00000000 003f003f 00000000",
     {"7"}},
};

TEST(Asm, ReferenceVectorsOnEveryGeneration) {
  for (const Vector& v : kVectors) {
    for (const std::string& g : v.gens) {
      Outcome r = probe({"asm", "--gen", g}, std::string(v.line) + "\n");
      EXPECT_EQ(r.rc, 0) << "gen " << g << ": " << v.line << "\n" << r.err;
      EXPECT_EQ(r.out, std::string(v.dwords) + "\n") << "gen " << g << ": " << v.line;
      EXPECT_TRUE(r.err.empty()) << r.err;
    }
  }
}

TEST(Asm, ManyPacketsOneLineEach) {
  std::string in, want;
  for (const Vector& v : kVectors) {
    if (v.gens != kAllGens) continue;
    in += std::string(v.line) + "\n";
    want += std::string(v.dwords) + "\n";
  }
  Outcome r = probe({"asm", "--gen", "4.4.2"}, in);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, want);
}

TEST(Asm, CommentsBlankLinesAndWhitespace) {
  const std::string in =
      "# a comment line\n"
      "\n"
      "   \t\n"
      "  trap   ctx=0x1234   # trailing comment\n"
      "#trap ctx=1\n"
      "fence addr=0x00007F0000400000 value=1\r\n"  // CRLF
      "trap ctx=5";                                 // no final newline
  Outcome r = probe({"asm", "--gen", "5"}, in);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "00000006 00001234\n"
            "00000005 00400000 00007f00 00000001\n"
            "00000006 00000005\n");
  EXPECT_EQ(probe({"asm", "--gen", "5"}, "").out, "");
  EXPECT_EQ(probe({"asm", "--gen", "5"}, "").rc, 0);
}

TEST(Asm, NumberForms) {
  // Decimal, hex (either case), negative decimal on 64-bit signed fields.
  EXPECT_EQ(probe({"asm", "--gen", "4"}, "trap ctx=4660\n").out, "00000006 00001234\n");
  EXPECT_EQ(probe({"asm", "--gen", "4"}, "trap ctx=0X1234\n").out, "00000006 00001234\n");
  EXPECT_EQ(probe({"asm", "--gen", "4"}, "atomic_add64 addr=0x1000 value=-2\n").out,
            "5e00000a 00001000 00000000 fffffffe ffffffff 00000000 00000000 00000000\n");
  EXPECT_EQ(probe({"asm", "--gen", "4"}, "atomic op=15 addr=0x1004 value=1\n").out,
            "1e00000a 00001004 00000000 00000001 00000000 00000000 00000000 00000000\n");
}

TEST(Asm, ReservedBits) {
  Outcome r = probe({"asm", "--gen", "4"}, "trap ctx=1 rsvd1=0x80000000\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "00000006 80000001\n");
  r = probe({"asm", "--gen", "4"}, "trap ctx=1 rsvd1=0x1\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "rsvd1=0x1 overlaps defined fields")) << r.err;
}

TEST(Asm, GfxSelectsTheGeneration) {
  const std::string in = "swap a=0x1000 b=0x2000 bytes=64\n";
  Outcome by_gen = probe({"asm", "--gen", "4.4.2"}, in);
  EXPECT_EQ(by_gen.rc, 0) << by_gen.err;
  EXPECT_EQ(by_gen.out, "00000901 0000003f 00000000 00001000 00000000 00002000 00000000\n");
  EXPECT_EQ(probe({"asm", "--gfx", "gfx942"}, in).out, by_gen.out);
  EXPECT_EQ(probe({"asm", "--gfx", "GFX942"}, in).out, by_gen.out);
  EXPECT_EQ(probe({"asm", "--gfx", "942", "--gen", "4.4.2"}, in).out, by_gen.out);
  EXPECT_EQ(probe({"asm", "--gen", "4.4.5"}, in).out, by_gen.out);  // alias
  // gfx90a is SDMA 4: no swap there.
  Outcome r = probe({"asm", "--gfx", "gfx90a"}, in);
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "swap does not exist on SDMA 4")) << r.err;
  // Disagreeing --gen and --gfx.
  r = probe({"asm", "--gen", "5", "--gfx", "gfx942"}, in);
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "disagree")) << r.err;
}

TEST(Asm, MissingOrUnknownGenerationListsThem) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"asm"}, {"asm", "--gen", "8"}, {"asm", "--gen", "gfx942"},
        {"dis"}, {"dis", "--gen", "4.3"}}) {
    Outcome r = probe(args, "trap\n");
    EXPECT_EQ(r.rc, 2) << args.back();
    EXPECT_TRUE(contains(r.err, "4, 4.4, 4.4.2, 5, 5.2, 6, 7")) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  Outcome r = probe({"asm", "--gfx", "gfx9000"}, "trap\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "unknown gfx target 'gfx9000'")) << r.err;
  EXPECT_TRUE(contains(r.err, "gfx942")) << r.err;
}

// Each bad line: exit 2, FILE:LINE: message naming the problem, no dwords for
// it, and the good lines around it still assembled.
struct BadLine {
  const char* gen;
  const char* line;
  const char* message;  // part of the expected error
};

const std::vector<BadLine> kBadLines = {
    {"4", "bogus x=1", "unknown op 'bogus'"},
    {"4", "copy src=0x1000 dst=0x2000 bytez=4", "unknown key 'bytez'"},
    {"4", "copy src=0x1000 dst=0x2000", "missing required field 'bytes'"},
    {"4", "fence addr=0x1000", "missing required field 'value'"},
    {"4", "fence addr=0x1000 value=0x100000000", "value=0x100000000 does not fit its 32-bit field"},
    {"4", "trap ctx=0x10000000", "ctx=0x10000000 does not fit its 28-bit field"},
    {"4", "copy src=0x1000 dst=0x2000 bytes=0x3FFF01", "exceeds the generation's limit of 0x3fff00"},
    {"4", "copy src=0x1000 dst=0x2000 bytes=0x400001", "does not fit its 22-bit field"},
    {"6", "copy src=0x1000 dst=0x2000 bytes=0x3FFFFF01", "exceeds the generation's limit"},
    {"4", "copy src=0x1000 dst=0x2000 bytes=0", "bytes must be at least 1"},
    {"4", "fence addr=0x7F0000400002 value=1", "addr=0x7f0000400002 is not 4-byte aligned"},
    {"4", "atomic_add64 addr=0x1004 value=1", "addr=0x1004 is not 8-byte aligned"},
    {"4", "timestamp addr=0x1004", "is not 8-byte aligned"},
    {"4", "ib addr=0x1010 size=8", "is not 32-byte aligned"},
    {"4", "fill dst=0x1000 value=1 bytes=6", "bytes=0x6 is not 4-byte aligned"},
    {"4", "fence addr=0x1000 value=1x", "value '1x' for key 'value' is not a number"},
    {"4", "fence addr=0x1000 value=-1", "value '-1' for key 'value' is not a number"},
    {"4", "fence addr=0x1000 value=1 value=2", "key 'value' given twice"},
    {"4", "fence addr", "expected key=value"},
    {"4", "write dst=0x1000", "needs at least one data dword"},
    {"4", "write dst=0x1000 data=1,x", "data item 'x' is not a 32-bit number"},
    {"4", "mem_incr addr=0x1000", "mem_incr does not exist on SDMA 4"},
    {"7", "reg_write reg=1 value=2 byte_en=0xf", "unknown key 'byte_en' on SDMA 7"},
};

TEST(Asm, EveryBadLineIsReportedAndSkipped) {
  for (const BadLine& b : kBadLines) {
    const std::string in = std::string("trap ctx=1\n") + b.line + "\ntrap ctx=2\n";
    Outcome r = probe({"asm", "--gen", b.gen}, in);
    EXPECT_EQ(r.rc, 2) << b.line;
    EXPECT_EQ(r.out, "00000006 00000001\n00000006 00000002\n") << b.line;
    EXPECT_TRUE(contains(r.err, std::string("<stdin>:2: "))) << b.line << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, b.message)) << b.line << "\n" << r.err;
  }
}

TEST(Asm, AllBadLinesAreReportedInOneRun) {
  std::string in;
  for (const BadLine& b : kBadLines)
    if (std::string_view(b.gen) == "4") in += std::string(b.line) + "\n";
  Outcome r = probe({"asm", "--gen", "4"}, in);
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  size_t line = 0;
  for (const BadLine& b : kBadLines) {
    if (std::string_view(b.gen) != "4") continue;
    ++line;
    // The first 20 bad lines of an input are shown, then how many more.
    EXPECT_EQ(contains(r.err, "<stdin>:" + std::to_string(line) + ": "), line <= 20) << line;
  }
  ASSERT_GT(line, 20u);
  EXPECT_TRUE(contains(r.err, "<stdin>: " + std::to_string(line - 20) + " more error")) << r.err;
  EXPECT_TRUE(contains(r.err, std::to_string(line) + " bad lines")) << r.err;
}

TEST(Dis, StreamsAndNeverEchoesBinary) {
  // Binary input: one huge "line" of raw bytes is refused without echoing it,
  // and the error lines stay few.
  std::string junk(200000, '\x01');
  for (size_t i = 0; i < junk.size(); i += 7) junk[i] = static_cast<char>(0x80 + i % 100);
  Outcome r = probe({"dis", "--gen", "4"}, junk + "\n" + std::string(30, 'x') + "\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "line longer than 65536 bytes")) << r.err.substr(0, 300);
  for (char c : r.err) ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << "raw byte " << int(c) << " on stderr";
  EXPECT_LT(r.err.size(), 4000u);
  // Many packets over many lines come out in order, and a bad dword after
  // good packets stops the printing there (the packets before stay printed).
  std::string many;
  for (int i = 0; i < 3000; ++i) many += "00000006 " + std::string(i % 2 ? "00000001" : "00000002") + "\n";
  r = probe({"dis", "--gen", "4"}, many + "00000006 zz\n00000006 00000003\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(count_lines(r.out), 3000u);
  EXPECT_TRUE(contains(r.err, "<stdin>:3001: 'zz' is not a 32-bit hex dword")) << r.err;
  EXPECT_TRUE(contains(r.err, "stopped at the first bad line")) << r.err;
  // A packet split over lines is put together.
  r = probe({"dis", "--gen", "4"}, "00000005\n00400000 00007f00\n00000001\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "fence addr=0x7f0000400000 value=0x1\n");
}

TEST(Asm, FilesAndStdin) {
  const std::string a = write_file("a.s", "# file a\ntrap ctx=0xa\n");
  const std::string b = write_file("b.s", "trap ctx=0xb\nfence addr=0x1000 value=1\n");
  Outcome r = probe({"asm", "--gen", "4", a, "-", b}, "trap ctx=0x5\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "00000006 0000000a\n"
            "00000006 00000005\n"
            "00000006 0000000b\n"
            "00000005 00001000 00000000 00000001\n");
  // Same text from a file or from stdin gives the same dwords.
  const std::string text = read_file(b);
  EXPECT_EQ(probe({"asm", "--gen", "4", b}).out, probe({"asm", "--gen", "4"}, text).out);
  EXPECT_EQ(probe({"asm", "--gen", "4", "-"}, text).out, probe({"asm", "--gen", "4"}, text).out);
}

TEST(Asm, ErrorsNameTheFileAndLine) {
  const std::string good = write_file("good.s", "trap ctx=1\n");
  const std::string bad = write_file("bad.s", "trap ctx=2\n\ncopy src=1 dst=2\n");
  Outcome r = probe({"asm", "--gen", "4", good, bad});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "00000006 00000001\n00000006 00000002\n");
  EXPECT_TRUE(contains(r.err, bad + ":3: copy (SDMA 4): missing required field 'bytes'")) << r.err;
}

TEST(Asm, UnreadableFile) {
  Outcome r = probe({"asm", "--gen", "4", scratch() + "/does-not-exist.s"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "does-not-exist.s: cannot open")) << r.err;
}

TEST(Asm, ListPrintsOpsAndKeys) {
  Outcome r = probe({"asm", "--list", "--gen", "4"});
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* s : {"copy ", "bytes", "src", "dst", "atomic_add64", "poll ", "retry",
                        "fence addr value", "trap [ctx]"})
    EXPECT_TRUE(contains(r.out, s)) << s;
  EXPECT_FALSE(contains(r.out, "mem_incr"));
  EXPECT_FALSE(contains(r.out, "swap"));
  Outcome r5 = probe({"asm", "--list", "--gen", "5"});
  EXPECT_TRUE(contains(r5.out, "mem_incr"));
  EXPECT_TRUE(contains(probe({"asm", "--list", "--gfx", "gfx942"}).out, "swap"));
  EXPECT_EQ(probe({"asm", "--list"}).rc, 2);
}

// ---------------------------------------------------------------------------
// dis

const char* kProgram =
    "poll addr=0x00007F0000500000 ref=1 mask=0xffffffff func=5 interval=4 retry=0xfff\n"
    "timestamp addr=0x00007F0000700000\n"
    "copy src=0x00007F0000001000 dst=0x00007F0000200000 bytes=0x100000\n"
    "copy src=0x00007F0000001003 dst=0x00007F0000200001 bytes=3 tmz=1\n"
    "fill dst=0x00007F0000200000 value=0xDEADBEEF bytes=4096\n"
    "fill8 dst=0x00007F0000200000 value=0x5a bytes=7\n"
    "write dst=0x00007F0000300000 data=0x11111111,0,0x22222222\n"
    "fence addr=0x00007F0000400000 value=1\n"
    "atomic_add64 addr=0x00007F0000600000 value=-1\n"
    "atomic op=8 addr=0x00007F0000600004 value=5 cmp=4\n"
    "nop count=2\n"
    "nop data=0,0x7\n"
    "cond_exe addr=0x00007F0000800000 ref=1 count=7 rsvd4=0x80000000\n"
    "trap ctx=0x1234\n";

TEST(Dis, RoundTripOnEveryGeneration) {
  for (const std::string& g : kAllGens) {
    Outcome a = probe({"asm", "--gen", g}, kProgram);
    ASSERT_EQ(a.rc, 0) << g << ": " << a.err;
    Outcome d = probe({"dis", "--gen", g}, a.out);
    ASSERT_EQ(d.rc, 0) << g << ": " << d.err;
    EXPECT_EQ(count_lines(d.out), count_lines(a.out)) << d.out;
    Outcome again = probe({"asm", "--gen", g}, d.out);
    EXPECT_EQ(again.rc, 0) << g << ": " << again.err;
    EXPECT_EQ(again.out, a.out) << g << "\n" << d.out;
  }
}

TEST(Dis, PrintsTheAsmSyntax) {
  Outcome r = probe({"dis", "--gen", "4"},
                "00000001 00000fff 00000000 00001000 00007f00 00200000 00007f00\n"
                "5e00000a 00600000 00007f00 ffffffff ffffffff 00000000 00000000 00000000\n"
                "d0000008 00500000 00007f00 00000007 ffffffff 0fff0004\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "copy src=0x7f0000001000 dst=0x7f0000200000 bytes=4096\n"
            "atomic_add64 addr=0x7f0000600000 value=0xffffffffffffffff\n"
            "poll addr=0x7f0000500000 ref=0x7 mask=0xffffffff func=5 interval=4 retry=4095\n");
}

TEST(Dis, InputForms) {
  // 0x prefixes, any whitespace, packets split across lines, comments.
  Outcome r = probe({"dis", "--gen", "4"},
                "# a fence, split over lines\n"
                "0x00000005 0X00400000\n"
                "\t00007f00   # high address\n"
                "1\n"
                "\n"
                "6 1234\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "fence addr=0x7f0000400000 value=0x1\ntrap ctx=0x1234\n");
  EXPECT_EQ(probe({"dis", "--gen", "4"}, "").out, "");
}

TEST(Dis, FilesAndStdin) {
  const std::string a = write_file("a.dw", "00000006 0000000a\n");
  Outcome r = probe({"dis", "--gen", "4", a, "-"}, "00000006 0000000b\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "trap ctx=0xa\ntrap ctx=0xb\n");
}

TEST(Dis, TruncatedPacketGivesItsOffset) {
  Outcome r = probe({"dis", "--gen", "4"},
                "00000005 00400000 00007f00 00000001\n"
                "00000001 00000fff 00000000 00001000\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "fence addr=0x7f0000400000 value=0x1\n");
  EXPECT_TRUE(contains(r.err, "<stdin>:2: dword offset 4: truncated copy packet")) << r.err;
}

TEST(Dis, UnknownOpcodeGivesItsOffset) {
  Outcome r = probe({"dis", "--gen", "4"},
                "00000006 00001234 00000000 000000ff 00000006 00000001\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "trap ctx=0x1234\nnop\n");
  EXPECT_TRUE(contains(r.err, "dword offset 3: unknown opcode 255")) << r.err;
  EXPECT_TRUE(contains(r.err, "3 dwords not disassembled")) << r.err;
  // A known opcode with an unknown sub-op.
  r = probe({"dis", "--gen", "5"}, "00000301\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "dword offset 0: opcode 1 sub-op 3")) << r.err;
  // Offsets count from the start of each input.
  const std::string f = write_file("bad.dw", "00000000\n00000000\n000000ff\n");
  r = probe({"dis", "--gen", "4", f});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "nop\nnop\n");
  EXPECT_TRUE(contains(r.err, f + ":3: dword offset 2: unknown opcode 255")) << r.err;
}

TEST(Dis, BadDwordText) {
  Outcome r = probe({"dis", "--gen", "4"}, "00000006 zz\n123456789\n00000006 00000001\n");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_TRUE(contains(r.err, "<stdin>:1: 'zz' is not a 32-bit hex dword")) << r.err;
  EXPECT_TRUE(contains(r.err, "<stdin>:2: '123456789' is not a 32-bit hex dword")) << r.err;
}

// ---------------------------------------------------------------------------
// gfx

TEST(Gfx, Table) {
  Outcome r = probe({"gfx"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "gfx942   4.4.2")) << r.out;
  EXPECT_TRUE(contains(r.out, "sdma_v4_4_2.c")) << r.out;
  EXPECT_TRUE(contains(r.out, "gfx1201")) << r.out;
}

TEST(Gfx, Json) {
  Outcome r = probe({"gfx", "--json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{\"targets\": [", 0), 0u) << r.out;
  EXPECT_TRUE(contains(r.out, "{\"gfx\": \"gfx942\", \"generation\": \"4.4.2\", \"sdma_ip\": "
                              "\"4.4.2\", \"products\": \"MI300X, MI300A, MI325X\""))
      << r.out;
  EXPECT_TRUE(contains(r.out, "\n]}\n"));
  EXPECT_EQ(probe({"--json", "gfx"}).out, r.out);
}

TEST(Gfx, Lookup) {
  Outcome r = probe({"gfx", "gfx90a", "942", "110000"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 4u) << r.out;
  EXPECT_TRUE(contains(r.out, "gfx90a"));
  EXPECT_TRUE(contains(r.out, "gfx942"));
  EXPECT_TRUE(contains(r.out, "gfx1100"));
  r = probe({"gfx", "gfx1"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "unknown gfx target 'gfx1'"));
}

// ---------------------------------------------------------------------------
// demo

TEST(Demo, RunsAndRoundTrips) {
  Outcome r = probe({"demo"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "SDMA 4.4.2"));
  EXPECT_TRUE(contains(r.out, "5e00000a 00600000 00007f00 ffffffff ffffffff"));
  EXPECT_TRUE(contains(r.out, "atomic_add64 addr=0x7f0000600000"));
  EXPECT_TRUE(contains(r.out, "OK:"));
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const std::string& g : kAllGens) EXPECT_EQ(probe({"demo", "--gen", g}).rc, 0) << g;
  EXPECT_EQ(probe({"demo", "--gfx", "gfx1100"}).rc, 0);
  EXPECT_EQ(probe({"demo", "--gen", "3"}).rc, 2);
}

// ---------------------------------------------------------------------------
// hopper-ce text form

TEST(Asm, HopperCeMethods) {
  // Method header (clc86f.h): inc = 1<<29, count 2 <<16, subch 4 <<13, method 0x400>>2.
  Outcome r = probe({"asm", "--gen", "hopper-ce"},
                    "copy.offset_in_upper upper=0x0; copy.offset_in_lower value=0x1000\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "20028100 00000000 00001000\n");
  Outcome d = probe({"dis", "--gen", "hopper-ce"}, r.out);
  EXPECT_EQ(d.rc, 0) << d.err;
  EXPECT_TRUE(contains(d.out, "copy.offset_in_lower value=0x1000")) << d.out;
  Outcome back = probe({"asm", "--gen", "hopper-ce"}, d.out);
  EXPECT_EQ(back.out, r.out);
  EXPECT_EQ(probe({"asm", "--gen", "hopper-ce"}, "copy.no_such_method x=1\n").rc, 2);
  EXPECT_TRUE(contains(probe({"asm", "--gen", "hopper-ce", "--list"}).out, "copy.launch_dma"));
}

// ---------------------------------------------------------------------------
// Device commands on the emulated node

TEST(List, EmuTableAndJson) {
  Outcome t = probe({"list", "--backend", "emu", "--preset", "mi300x"});
  EXPECT_EQ(t.rc, 0) << t.err;
  EXPECT_TRUE(contains(t.out, "gpu 7: gfx942, SDMA 4.4.2, 16 engines"));
  Outcome j = probe({"list", "--preset", "mi300x", "--json"});
  EXPECT_EQ(j.rc, 0) << j.err;
  for (const char* key : {"\"backend\": \"emu\"", "\"gpus\": [", "\"index\": 7", "\"sdma_generation\": \"4.4.2\"",
                          "\"engines\": [", "\"kind\": \"xgmi\"", "\"kind\": \"pcie\"", "\"links\": [",
                          "\"peer\": 1", "\"type\": \"xgmi\"", "\"recommended_engines\": [14]"})
    EXPECT_TRUE(contains(j.out, key)) << key;
  Outcome c = probe({"list", "--gpus", "3", "--engines", "2", "--json"});
  EXPECT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(contains(c.out, "\"index\": 2"));
  EXPECT_FALSE(contains(c.out, "\"index\": 3"));
  EXPECT_EQ(probe({"list", "--preset", "nope"}).rc, 2);
  // --settings: the backend's own settings, beside the emulator's flags.
  Outcome s = probe({"list", "--gpus", "2", "--settings", "memory_per_gpu=64M engines=3", "--json"});
  EXPECT_EQ(s.rc, 0) << s.err;
  EXPECT_TRUE(contains(s.out, "\"index\": 1")) << s.out;
  EXPECT_FALSE(contains(s.out, "\"index\": 2")) << s.out;
  EXPECT_TRUE(contains(s.out, "\"memory_bytes\": 67108864")) << s.out;
  Outcome bad = probe({"list", "--settings", "pin_engines=on"});
  EXPECT_EQ(bad.rc, 2) << bad.out << bad.err;
  EXPECT_TRUE(contains(bad.err, "--settings: backend emu has no setting 'pin_engines'")) << bad.err;
  Outcome twice = probe({"list", "--gpus", "2", "--settings", "gpus=3"});
  EXPECT_EQ(twice.rc, 2) << twice.out << twice.err;
  EXPECT_TRUE(contains(twice.err, "'gpus' is given twice")) << twice.err;
}

TEST(List, UnavailableBackendsExitFive) {
  if (access("/dev/nvidiactl", F_OK) != 0) {
    Outcome nv = probe({"list", "--backend", "nv"});
    EXPECT_EQ(nv.rc, 5) << nv.out << nv.err;
    EXPECT_TRUE(contains(nv.err, "/dev/nvidiactl")) << nv.err;
  }
  if (access("/dev/kfd", F_OK) != 0) {
    Outcome kfd = probe({"list", "--backend", "kfd"});
    EXPECT_EQ(kfd.rc, 5) << kfd.out << kfd.err;
    EXPECT_TRUE(contains(kfd.err, "kfd")) << kfd.err;
  }
}

TEST(Exec, RunsPacketsWithNamedBuffers) {
  Outcome r = probe({"exec", "--gpu", "0", "--engine", "2", "--buffer", "a=4K", "--buffer", "b=4K@host", "--fill",
                     "a=0xdeadbeef", "--dump", "b:16", "--dump", "b+32:8"},
                    "copy src=$a dst=$b+4 bytes=8   # two dwords\nfence addr=$b value=0x1234\n"
                    "write dst=$b+32 data=0x11,0x22\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "b+0: 00001234 deadbeef deadbeef 00000000\nb+32: 00000011 00000022\n");
  Outcome bad = probe({"exec", "--buffer", "a=4K"}, "copy src=$nope dst=$a bytes=4\n");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(contains(bad.err, "unknown buffer '$nope'")) << bad.err;
  Outcome fault = probe({"exec", "--buffer", "a=4K", "--timeout-ms", "2000"}, "copy src=0x1000 dst=$a bytes=4\n");
  EXPECT_EQ(fault.rc, 4) << fault.err;
  EXPECT_TRUE(contains(fault.err, "page fault")) << fault.err;
}

TEST(Copy, VerifiedCopyAndJson) {
  Outcome r = probe({"copy", "--src", "0", "--dst", "3", "--bytes", "1M", "--json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* key : {"\"bytes\": 1048576", "\"seconds\": ", "\"gbps\": ", "\"verified\": true"})
    EXPECT_TRUE(contains(r.out, key)) << r.out;
  Outcome t = probe({"copy", "--src", "1", "--dst", "1", "--bytes", "12345"});
  EXPECT_EQ(t.rc, 0) << t.err;
  EXPECT_TRUE(contains(t.out, "yes"));
  EXPECT_EQ(probe({"copy", "--src", "0", "--dst", "9", "--bytes", "4K"}).rc, 2);
}

// copy records only the vocabulary and the queue's own wake-up, so it runs on
// every ISA: SDMA (mi300x) and Hopper CE (h200, one GPU and two).
TEST(Copy, WorksOnEveryIsa) {
  const std::vector<std::vector<std::string>> runs = {
      {"--preset", "mi300x", "--src", "0", "--dst", "1"},
      {"--preset", "h200", "--src", "0", "--dst", "0"},
      {"--preset", "h200", "--gpus", "2", "--src", "0", "--dst", "1"},
  };
  for (const auto& where : runs) {
    std::vector<std::string> argv = {"copy", "--bytes", "1M", "--json"};
    argv.insert(argv.end(), where.begin(), where.end());
    Outcome r = probe(argv);
    EXPECT_EQ(r.rc, 0) << where[1] << ": " << r.err;
    EXPECT_TRUE(contains(r.out, "\"verified\": true")) << where[1] << ": " << r.out;
    EXPECT_EQ(r.err, "") << where[1];
  }
}

TEST(Copy, InjectedHangsAreDiagnosedWithinTheDeadline) {
  for (const char* kind : {"stall", "lost-signal"}) {
    const auto t0 = std::chrono::steady_clock::now();
    Outcome r = probe({"copy", "--src", "0", "--dst", "1", "--bytes", "4K", "--inject", kind, "--timeout-ms", "300"});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.rc, 3) << kind << ": " << r.err;
    EXPECT_LT(s, 0.3 + 2.0) << kind;  // deadline plus process start-up and teardown
    EXPECT_TRUE(contains(r.err, std::string(kind) == "stall" ? "never fetched" : "completion write was lost"))
        << r.err;
    EXPECT_TRUE(contains(r.err, "rptr=")) << r.err;
    EXPECT_TRUE(contains(r.err, "expected >= 1, actual 0")) << r.err;
  }
}

// `--json -` means stdout, as `--json` alone: JSON there, and no file named "-".
TEST(Collectives, JsonDashIsStdout) {
  const std::string dash = scratch() + "/-";
  ::unlink(dash.c_str());
  Outcome r = probe({"allgather", "--preset", "small", "--min", "1K", "--max", "4K", "--json", "-"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(probe_test::is_valid_json(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"rows\"")) << r.out;
  EXPECT_NE(::access(dash.c_str(), F_OK), 0) << "a file named '-' was written";
  EXPECT_EQ(probe({"allgather", "--preset", "small", "--min", "1K", "--max", "4K", "--json"}).rc, 0);
}

TEST(Collectives, SweepsPrintRowsAndJson) {
  const std::string json = scratch() + "/ag.json";
  Outcome r = probe({"allgather", "--preset", "mi300x", "--min", "1K", "--max", "64K", "--json", json});
  EXPECT_EQ(r.rc, 0) << r.err;
  // nccl-tests layout: a '#' banner and header, one row per size, a summary.
  for (const char* text : {"# sdma-probe allgather: 8 ranks on 8 GPUs\n", "backend: emu (emulated", "preset: mi300x",
                           "engines: ", "variant: auto", "iterations: by size", "2 warm-up", "step factor 2",
                           "out-of-place", "in-place", "#wrong", "stddev", "(elements)",
                           "# Out of bounds values : 0 OK\n", "# Avg bus bandwidth    : "})
    EXPECT_TRUE(contains(r.out, text)) << text << " in " << r.out;
  const std::vector<std::string> rows = data_rows(r.out);
  ASSERT_EQ(rows.size(), 7u) << r.out;  // 1K..64K
  uint64_t size = 1024;
  for (const std::string& row : rows) {
    // size count type variant eng iters time min max stddev algbw busbw #wrong | time algbw busbw #wrong
    const std::vector<std::string> f = fields(row);
    ASSERT_EQ(f.size(), 17u) << row;
    EXPECT_EQ(f[0], std::to_string(size)) << row;
    EXPECT_EQ(f[1], std::to_string(size)) << row;  // count of uint8
    EXPECT_EQ(f[2], "uint8") << row;
    EXPECT_GE(std::stod(f[8]), std::stod(f[6])) << row;  // max >= mean
    EXPECT_LE(std::stod(f[7]), std::stod(f[6])) << row;  // min <= mean
    EXPECT_EQ(f[12], "0") << row;                        // #wrong: a count of bytes
    EXPECT_GT(std::stod(f[13]), 0) << row;               // in place: time, algbw, busbw, #wrong
    EXPECT_EQ(f[16], "0") << row;
    size *= 2;
  }
  EXPECT_FALSE(contains(r.err, "\r")) << r.err;  // no progress bar in captured output
  const std::string j = read_file(json);
  for (const char* key : {"\"rows\": [", "\"size\": 1024", "\"size\": 65536", "\"time_us\": ", "\"algbw_gbps\": ",
                          "\"busbw_gbps\": ", "\"verified\": true", "\"wrong_bytes\": 0", "\"min_us\": ",
                          "\"max_us\": ", "\"stddev_us\": ", "\"emulated\": true", "\"step_factor\": 2",
                          "\"interrupted\": null", "\"in_place\": {\"time_us\": "})
    EXPECT_TRUE(contains(j, key)) << key;
  EXPECT_TRUE(contains(j, "\"wrong_bytes\": 0, \"min_us\": ")) << j;  // in place, verified
  // Every op: in-place columns measured and verified, or n/a where the op has no in-place form here.
  for (const char* op : {"alltoall", "broadcast", "gather", "scatter", "p2p"}) {
    Outcome o = probe({op, "--gpus", "4", "--engines", "4", "--min", "4K", "--max", "8K"});
    EXPECT_EQ(o.rc, 0) << op << ": " << o.err;
    const std::vector<std::string> op_rows = data_rows(o.out);
    ASSERT_EQ(op_rows.size(), 2u) << op << ": " << o.out;
    const std::vector<std::string> f = fields(op_rows[0]);
    ASSERT_EQ(f.size(), 17u) << op_rows[0];
    const bool none = std::string(op) == "alltoall" || std::string(op) == "p2p";
    EXPECT_EQ(f[16], none ? "n/a" : "0") << op << ": " << op_rows[0];
  }
  Outcome v = probe({"allgather", "--gpus", "4", "--min", "4K", "--max", "4K", "--variant", "chain"});
  EXPECT_EQ(v.rc, 2);
  Outcome pl = probe({"alltoall", "--preset", "mi300x", "--min", "64K", "--max", "64K", "--variant", "swap",
                      "--prelaunch"});
  EXPECT_EQ(pl.rc, 0) << pl.err;
}


TEST(Collectives, LoopbackRanksOnTheEmulatedH200) {
  const std::string json = scratch() + "/h200.json";
  Outcome r = probe({"allgather", "--preset", "h200", "--ranks", "4", "--min", "1K", "--max", "256K", "--json", json});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(data_rows(r.out).size(), 9u) << r.out;
  EXPECT_TRUE(contains(r.out, "loopback")) << r.out;
  EXPECT_TRUE(contains(r.out, "# Out of bounds values : 0 OK")) << r.out;
  const std::string j = read_file(json);
  for (const char* key : {"\"ranks\": 4", "\"gpus\": 1", "\"loopback\": true", "\"wrong_bytes\": 0"})
    EXPECT_TRUE(contains(j, key)) << key << " in " << j;
  EXPECT_FALSE(contains(j, "\"wrong_bytes\": 1")) << j;
  for (const char* op : {"alltoall", "broadcast", "gather", "scatter", "p2p"}) {
    Outcome o = probe({op, "--preset", "h200", "--ranks", "3", "--min", "4K", "--max", "8K"});
    EXPECT_EQ(o.rc, 0) << op << ": " << o.err;
  }
  // Capabilities: copy engines have no broadcast copies.
  Outcome bcst = probe({"allgather", "--preset", "h200", "--ranks", "4", "--max", "4K", "--variant", "bcst"});
  EXPECT_EQ(bcst.rc, 2) << bcst.err;
  EXPECT_TRUE(contains(bcst.err, "broadcast copies")) << bcst.err;
  Outcome many = probe({"allgather", "--ranks", "65", "--max", "4K"});
  EXPECT_EQ(many.rc, 2) << many.err;
  Outcome one = probe({"p2p", "--preset", "h200", "--max", "4K"});
  EXPECT_EQ(one.rc, 2) << one.err;
  EXPECT_TRUE(contains(one.err, "--ranks 2")) << one.err;
  // SDMA engines run loopback ranks too: 4 ranks on 2 emulated GPUs.
  Outcome sdma = probe({"alltoall", "--preset", "small", "--ranks", "4", "--min", "1K", "--max", "64K"});
  EXPECT_EQ(sdma.rc, 0) << sdma.err;
}

TEST(Collectives, StepFactor) {
  Outcome r = probe({"broadcast", "--gpus", "2", "--min", "1K", "--max", "64K", "--step-factor", "4"});
  EXPECT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> sizes;
  for (const std::string& row : data_rows(r.out)) sizes.push_back(fields(row).at(0));
  EXPECT_EQ(sizes, (std::vector<std::string>{"1024", "4096", "16384", "65536"})) << r.out;
  EXPECT_TRUE(contains(r.out, "step factor 4")) << r.out;
  for (const char* bad : {"1", "0", "1025", "-2", "4294967298"}) {
    Outcome b = probe({"broadcast", "--gpus", "2", "--max", "4K", "--step-factor", bad});
    EXPECT_EQ(b.rc, 2) << bad << ": " << b.err;
    EXPECT_TRUE(contains(b.err, "--step-factor")) << b.err;
    EXPECT_TRUE(contains(b.err, "2..1024")) << b.err;
  }
}

// nccl-tests' -c N: N >= 1 verifies (always done, once, after timing); 0
// would turn the check off, which sdma-probe does not do: refused, saying so.
TEST(Collectives, CheckFlagOfNcclTests) {
  for (const char* op : {"allgather", "allreduce"}) {
    Outcome ok = probe({op, "--gpus", "2", "-b", "1K", "-e", "2K", "-c", "1"});
    EXPECT_EQ(ok.rc, 0) << op << ": " << ok.err;
    EXPECT_EQ(data_rows(ok.out).size(), 2u) << ok.out;
    EXPECT_TRUE(contains(ok.out, "Out of bounds values : 0 OK")) << ok.out;
    Outcome off = probe({op, "--gpus", "2", "-b", "1K", "-e", "1K", "--check", "0"});
    EXPECT_EQ(off.rc, 2) << op << ": " << off.err;
    EXPECT_TRUE(contains(off.err, "always verifies every destination byte")) << off.err;
    Outcome bad = probe({op, "--gpus", "2", "-b", "1K", "-e", "1K", "-c", "-1"});
    EXPECT_EQ(bad.rc, 2) << op << ": " << bad.err;
    EXPECT_TRUE(contains(bad.err, "--check")) << bad.err;
  }
}

TEST(Collectives, DtypeCountsElements) {
  // alltoall on 3 ranks: each rank's chunk is whole floats (1024 / 3 = 341 B -> 85 floats = 340 B).
  Outcome r = probe({"alltoall", "--gpus", "3", "--min", "1K", "--max", "2K", "--dtype", "float"});
  EXPECT_EQ(r.rc, 0) << r.err;
  const std::vector<std::string> rows = data_rows(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(fields(rows[0])[0], "1020") << rows[0];  // 3 x 340 B
  EXPECT_EQ(fields(rows[0])[1], "255") << rows[0];
  EXPECT_EQ(fields(rows[0])[2], "float") << rows[0];
  EXPECT_EQ(fields(rows[0])[12], "0") << rows[0];
  // Sizes below one element run once, as one element.
  Outcome d = probe({"p2p", "--ranks", "2", "--min", "1", "--max", "16", "--dtype", "double"});
  EXPECT_EQ(d.rc, 0) << d.err;
  std::vector<std::string> sizes;
  for (const std::string& row : data_rows(d.out)) sizes.push_back(fields(row).at(0) + "/" + fields(row).at(1));
  EXPECT_EQ(sizes, (std::vector<std::string>{"8/1", "16/2"})) << d.out;
  Outcome bad = probe({"p2p", "--ranks", "2", "--max", "4K", "--dtype", "fp32"});
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "unknown --dtype 'fp32': give one of uint8")) << bad.err;
}

// --gen names the SDMA generation in every subcommand (asm, dis, demo, and
// the device commands); --sdma-gen, its old name on the device commands, still works.
TEST(Flags, GenIsTheGenerationEverywhere) {
  for (const char* flag : {"--gen", "--sdma-gen"}) {
    Outcome r = probe({"list", "--preset", "small", flag, "5"});
    EXPECT_EQ(r.rc, 0) << flag << ": " << r.err;
    EXPECT_TRUE(contains(r.out, "SDMA 5")) << r.out;
  }
  Outcome c = probe({"allgather", "--preset", "small", "--gen", "6", "--max", "4K"});
  EXPECT_EQ(c.rc, 0) << c.err;
  Outcome both = probe({"list", "--gen", "5", "--sdma-gen", "5"});
  EXPECT_EQ(both.rc, 2);
  EXPECT_TRUE(contains(both.err, "give one")) << both.err;
  Outcome a = probe({"asm", "--gen", "5"}, "nop\n");
  EXPECT_EQ(a.rc, 0) << a.err;
}

// --plot FILE.png draws the sweep with gnuplot; without gnuplot it is a clear
// "unavailable" (exit 5) that names the package, after the sweep ran.
TEST(Collectives, PlotDrawsAPngOrSaysWhatIsMissing) {
  const std::string png = scratch() + "/sweep.png";
  std::remove(png.c_str());
  Outcome r = probe({"allgather", "--preset", "small", "--min", "1K", "--max", "16K", "--plot", png});
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    EXPECT_EQ(r.rc, 0) << r.err;
    const std::string bytes = read_file(png);
    ASSERT_GE(bytes.size(), 8u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << "a PNG file";
    EXPECT_TRUE(contains(r.out, "# plot: " + png)) << r.out;
  } else {
    EXPECT_EQ(r.rc, 5) << r.err;
    EXPECT_TRUE(contains(r.err, "gnuplot-nox")) << r.err;
    EXPECT_TRUE(contains(r.out, "# Avg bus bandwidth")) << "the sweep ran first";
  }
}

TEST(Collectives, JsonFileBothSpellings) {
  for (const char* form : {"space", "equals"}) {
    SCOPED_TRACE(form);
    const std::string json = scratch() + "/both_" + form + ".json";
    std::vector<std::string> argv = {"allgather", "--preset", "small", "--min", "1K", "--max", "4K"};
    if (std::string(form) == "space") {
      argv.push_back("--json");
      argv.push_back(json);
    } else {
      argv.push_back("--json=" + json);
    }
    Outcome r = probe(argv);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "# Avg bus bandwidth")) << "the table still goes to stdout: " << r.out;
    EXPECT_TRUE(contains(read_file(json), "\"rows\"")) << read_file(json);
  }
  Outcome list = probe({"list", "--json=x.json"});
  EXPECT_EQ(list.rc, 2);
  EXPECT_TRUE(contains(list.err, "prints JSON on stdout")) << list.err;
}

TEST(Collectives, QueuesFlag) {
  const std::string json = scratch() + "/shared.json";
  Outcome r = probe({"allgather", "--preset", "h200", "--ranks", "4", "--min", "4K", "--max", "64K", "--queues", "per-engine",
                     "--json", json});
  EXPECT_EQ(r.rc, 0) << r.err;
  const std::string j = read_file(json);
  for (const char* key : {"\"queues\": \"per-engine\"", "\"wrong_bytes\": 0"}) EXPECT_TRUE(contains(j, key)) << key << " in " << j;
  // A variant whose lists wait on each other cannot share a queue: usage error.
  Outcome chain = probe({"broadcast", "--preset", "h200", "--ranks", "4", "--min", "64K", "--max", "64K",
                         "--variant", "chain", "--queues", "per-engine"});
  EXPECT_NE(chain.rc, 0) << chain.err;
  EXPECT_TRUE(contains(chain.err, "per_rank")) << chain.err;
  for (const char* q : {"auto", "per-rank"}) {  // chain runs there: on its own queues per rank
    Outcome ok = probe({"broadcast", "--preset", "h200", "--ranks", "4", "--min", "64K", "--max", "64K", "--variant",
                        "chain", "--queues", q});
    EXPECT_EQ(ok.rc, 0) << q << ": " << ok.err;
  }
  Outcome bad = probe({"allgather", "--preset", "h200", "--ranks", "2", "--max", "4K", "--queues", "shared"});
  EXPECT_EQ(bad.rc, 2) << bad.err;
}

}  // namespace

// --procs N: one process per rank, started by sdma-probe itself; rank 0
// prints the table, every rank verifies its own destinations.
TEST(CliProcs, RanksInSeparateProcessesVerifyEverySize) {
  for (const char* op : {"allgather", "alltoall", "broadcast"}) {
    const Outcome o = probe({op, "--procs", "3", "--min", "1K", "--max", "256K", "--json"}, "", 120);
    ASSERT_EQ(o.rc, 0) << op << ": " << o.err;
    EXPECT_TRUE(probe_test::is_valid_json(o.out)) << o.out;
    EXPECT_TRUE(contains(o.out, "\"ranks\": 3")) << o.out;
    EXPECT_FALSE(contains(o.out, "\"verified\": false")) << o.out;
    size_t rows = 0;
    for (size_t at = o.out.find("\"size\":"); at != std::string::npos; at = o.out.find("\"size\":", at + 1)) ++rows;
    EXPECT_EQ(rows, 9u) << o.out;  // 1K..256K, once, from rank 0 alone
  }
  const Outcome h = probe({"alltoall", "--procs", "2", "--preset", "h200", "--min", "4K", "--max", "64K"}, "", 120);
  ASSERT_EQ(h.rc, 0) << h.err;
  EXPECT_EQ(data_rows(h.out).size(), 5u) << h.out;  // one table, from rank 0 alone
}

TEST(CliProcs, ProcsAndRanksTogetherIsAUsageError) {
  const Outcome o = probe({"allgather", "--procs", "2", "--ranks", "2"});
  EXPECT_EQ(o.rc, 2);
  EXPECT_TRUE(contains(o.err, "give --procs or --ranks")) << o.err;
  const Outcome r = probe({"allgather", "--rank", "0"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "--procs launcher sets them")) << r.err;
}
