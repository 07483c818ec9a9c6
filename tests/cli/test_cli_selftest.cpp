// tests/cli/test_cli_selftest.cpp - `sdma-probe selftest` end to end on the
// emulated presets: a full matrix passes; an injected stall, lost completion
// or slow engine is named (JSON and table), with the exit code; bad flags.
//
// The emulator's bandwidth is the host's memcpy on a shared machine: engines
// of one GPU vary by 2x there, and by 20x while ctest -j runs builds beside
// (0.40 against a median of 7.9 GB/s, measured on 2 cores), so runs that must
// pass give --slow-ratio 0.002; the slow engine takes 20 times as long over
// every packet (load slows it as it slows its peers) and is named at the
// default ratio.
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "json_check.hpp"
#include "probe_runner.hpp"

namespace {

using probe_test::contains;
using probe_test::is_valid_json;
using probe_test::Outcome;
using probe_test::probe;

// The deadline of the checks that hang by design: short, yet long enough for
// the healthy engines of a sanitizer build.
const std::string kHangMs = std::to_string(300 * probe_test::kSlowdown);

size_t occurrences(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// The JSON list named `key` ("hung", "slow", ...), as text.
std::string json_list(const std::string& j, const std::string& key) {
  const size_t at = j.find("\"" + key + "\": [");
  if (at == std::string::npos) return {};
  return j.substr(at, j.find(']', at) - at + 1);
}

struct Preset {
  std::vector<std::string> flags;
  size_t engines;
};

TEST(Selftest, FullMatrixPassesOnEveryPreset) {
  const Preset presets[] = {{{"--preset", "mi300x"}, 128}, {{"--preset", "small"}, 8}, {{"--preset", "h200", "--gpus", "2"}, 6}};
  for (const Preset& p : presets) {
    // Under ThreadSanitizer the 128 emulated engines of mi300x take longer than a test may run.
    if (conccl::util::kThreadSanitizer && p.engines > 100) continue;
    std::vector<std::string> args = {"selftest", "--bytes", "1M", "--reps", "2", "--slow-ratio", "0.002", "--json"};
    args.insert(args.end(), p.flags.begin(), p.flags.end());
    const Outcome r = probe(args, "", 120.0 * probe_test::kSlowdown);
    SCOPED_TRACE(p.flags[1]);
    EXPECT_EQ(r.rc, 0) << r.err << r.out.substr(0, 4000);
    EXPECT_TRUE(is_valid_json(r.out));
    EXPECT_EQ(occurrences(r.out, "\"verdict\": \"pass\""), p.engines + 1);  // every engine, and the run
    // Every check ran and passed on every engine (the emulator has atomics and wake-ups).
    for (const char* check : {"copy", "fill", "signal", "wake", "poll", "atomic", "timestamp"})
      EXPECT_EQ(occurrences(r.out, "\"" + std::string(check) + "\": \"ok\""), p.engines) << check;
    EXPECT_EQ(occurrences(r.out, "\"placement\": \"ok\""), p.engines);
    EXPECT_FALSE(contains(r.out, "\"result\": \"FAIL\""));
    EXPECT_TRUE(contains(r.out, "\"summary\": {\"engines\": " + std::to_string(p.engines) + ", \"pass\": " +
                                    std::to_string(p.engines)));
    EXPECT_TRUE(contains(r.out, "\"exit_code\": 0"));
  }
}

TEST(Selftest, TableHasOneRowPerEngineWithEveryColumn) {
  const Outcome r = probe({"selftest", "--preset", "small", "--bytes", "1M", "--reps", "2", "--slow-ratio", "0.002"}, "", 60);
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* col : {"copy", "fill", "signal", "wake", "poll", "atomic", "timestamp", "peers", "GB/s",
                          "placement", "verdict"})
    EXPECT_TRUE(contains(r.out, col)) << col;
  // 2 GPUs x 4 engines; each copies into its one peer.
  EXPECT_EQ(occurrences(r.out, " 1/1 "), 8u) << r.out;
  EXPECT_EQ(occurrences(r.out, " pass\n"), 8u) << r.out;
  EXPECT_TRUE(contains(r.out, "selftest: 8 engines: 8 pass, 0 fail, 0 slow, 0 hang, 0 fault")) << r.out;
}

TEST(Selftest, AllPeersCopiesIntoEveryPeer) {
  const Outcome r = probe({"selftest", "--preset", "small", "--gpus", "4", "--engines", "2", "--bytes", "1M",
                           "--reps", "2", "--slow-ratio", "0.002", "--all-peers"},
                          "", 60);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(occurrences(r.out, " 3/3 "), 8u) << r.out;
  const Outcome sampled = probe({"selftest", "--preset", "small", "--gpus", "4", "--engines", "2", "--bytes", "1M",
                                 "--reps", "2", "--slow-ratio", "0.002"},
                                "", 60);
  EXPECT_EQ(sampled.rc, 0) << sampled.err;
  // A sample: the peer the engine is recommended for and one by rotation.
  EXPECT_EQ(occurrences(sampled.out, " of 3 "), 8u) << sampled.out;
}

TEST(Selftest, StalledEngineIsNamedAsHungAndTheOthersStillRun) {
  const Outcome r = probe({"selftest", "--preset", "small", "--bytes", "1M", "--reps", "2", "--slow-ratio", "0.002",
                           "--inject", "stall", "--inject-engine", "1:2", "--timeout-ms", kHangMs, "--json"},
                          "", 60.0 * probe_test::kSlowdown);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_TRUE(is_valid_json(r.out)) << r.out;
  const std::string hung = json_list(r.out, "hung");
  EXPECT_TRUE(contains(hung, "{\"gpu\": 1, \"engine\": 2, \"check\": \"copy\", \"hang_kind\": \"never fetched\"")) << hung;
  EXPECT_TRUE(contains(hung, "rptr=")) << hung;  // the diagnosis itself
  EXPECT_TRUE(contains(hung, "engine stalled")) << hung;
  EXPECT_EQ(occurrences(r.out, "\"verdict\": \"pass\""), 7u);  // engine 1:3, after the hung one, ran too
  EXPECT_TRUE(contains(r.out, "\"injected\": \"stall on engine 2 of GPU 1\""));
  EXPECT_LT(r.seconds, 30.0 * probe_test::kSlowdown);
}

TEST(Selftest, DroppedCompletionIsNamedOnSdmaAndHopper) {
  const Outcome sdma = probe({"selftest", "--preset", "small", "--bytes", "1M", "--reps", "2", "--slow-ratio", "0.002",
                              "--inject", "lost-signal", "--timeout-ms", kHangMs, "--json"},
                             "", 60);
  EXPECT_EQ(sdma.rc, 3) << sdma.err;
  EXPECT_TRUE(is_valid_json(sdma.out));
  EXPECT_TRUE(contains(json_list(sdma.out, "hung"),
                       "{\"gpu\": 0, \"engine\": 0, \"check\": \"copy\", \"hang_kind\": \"completion write lost\""))
      << sdma.out;
  const Outcome nv = probe({"selftest", "--preset", "h200", "--bytes", "1M", "--reps", "2", "--slow-ratio", "0.002",
                            "--inject", "lost-signal", "--inject-engine", "0:4", "--timeout-ms", kHangMs},
                           "", 60);
  EXPECT_EQ(nv.rc, 3) << nv.err;
  EXPECT_TRUE(contains(nv.out, "gpu 0 engine 4: copy: HANG (completion write lost)")) << nv.out;
  EXPECT_TRUE(contains(nv.out, "the completion write was lost")) << nv.out;
  EXPECT_TRUE(contains(nv.out, "selftest: 3 engines: 2 pass, 0 fail, 0 slow, 1 hang, 0 fault")) << nv.out;
}

TEST(Selftest, SlowEngineIsNamedAgainstItsPeers) {
  const Outcome r = probe({"selftest", "--preset", "small", "--bytes", "4M", "--reps", "2", "--inject", "slow",
                           "--inject-engine", "0:3", "--json"},
                          "", 60);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(is_valid_json(r.out));
  const std::string slow = json_list(r.out, "slow");
  EXPECT_TRUE(contains(slow, "{\"gpu\": 0, \"engine\": 3, \"kind\": \"xgmi\"")) << r.out;
  EXPECT_EQ(occurrences(slow, "\"gpu\""), 1u) << slow;
  EXPECT_TRUE(contains(r.out, "\"verdict\": \"slow\""));
  // Hopper: LCE3 (2 PCEs) is compared with LCE2 (2 PCEs), not with LCE4 (12).
  const Outcome nv = probe({"selftest", "--preset", "h200", "--bytes", "4M", "--reps", "2", "--inject", "slow",
                            "--inject-engine", "0:3"},
                           "", 60);
  EXPECT_EQ(nv.rc, 1) << nv.err;
  EXPECT_TRUE(contains(nv.out, "gpu 0 engine 3: SLOW: ")) << nv.out;
  EXPECT_TRUE(contains(nv.out, "of its 1 peer (ce engines of weight 2 on this GPU)")) << nv.out;
}

TEST(Selftest, BadFlagsAreUsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"selftest", "--inject", "melt"},
      {"selftest", "--preset", "small", "--inject", "stall", "--inject-engine", "0:9"},
      {"selftest", "--inject", "stall", "--inject-engine", "5:0", "--preset", "small"},
      {"selftest", "--inject", "stall", "--inject-engine", "zero"},
      {"selftest", "--inject-engine", "0:0"},
      {"selftest", "--inject", "stall", "--backend", "kfd"},
      {"selftest", "--bytes", "1"},
      {"selftest", "--reps", "0"},
      {"selftest", "--slow-ratio", "1.5"},
      {"selftest", "extra"},
  };
  for (const auto& args : bad) {
    const Outcome r = probe(args, "", 30);
    EXPECT_EQ(r.rc, 2) << args.back() << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args.back();
  }
  const Outcome engines = probe({"selftest", "--preset", "small", "--inject", "stall", "--inject-engine", "0:9"}, "", 30);
  EXPECT_TRUE(contains(engines.err, "GPU 0 has engines 0,1,2,3")) << engines.err;
}

TEST(Selftest, MissingBackendIsUnavailable) {
  for (const char* backend : {"kfd", "nv"}) {
    if (access(backend == std::string("kfd") ? "/dev/kfd" : "/dev/nvidiactl", F_OK) == 0) continue;  // present here
    const Outcome r = probe({"selftest", "--backend", backend}, "", 30);
    EXPECT_EQ(r.rc, 5) << backend << ": " << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST(Selftest, HelpAndUsage) {
  const Outcome list = probe({"--help"});
  EXPECT_TRUE(contains(list.out, "selftest"));
  const Outcome help = probe({"help", "selftest"});
  EXPECT_EQ(help.rc, 0);
  for (const char* flag : {"--bytes", "--all-peers", "--inject", "--inject-engine", "--slow-ratio", "--reps"})
    EXPECT_TRUE(contains(help.out, flag)) << flag;
}

}  // namespace
