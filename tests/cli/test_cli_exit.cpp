// tests/cli/test_cli_exit.cpp - how sdma-probe ends: after a timeout within
// the deadline plus a small grace, even with a long packet still in flight.
#include <string>

#include <gtest/gtest.h>

#include "probe_runner.hpp"

namespace {

using probe_test::contains;
using probe_test::Outcome;
using probe_test::probe;

// One copy_window of 400 slices of 256 MiB (the slices overlap, so two 1 GiB
// buffers hold it): about 100 GiB, far longer than the 200 ms deadline. The
// process used to print the diagnosis and then live until the emulated
// engine had finished the packet (~15 s).
TEST(Exit, TimeoutEndsTheProcessWithALongPacketInFlight) {
  const std::string packet =
      "copy_window src=$a src_pitch=16384 dst=$b dst_pitch=16384 rect_x=16384 rect_y=16384 rect_z=400 "
      "src_slice_pitch=16384 dst_slice_pitch=16384 elementsize=0\n";
  Outcome r = probe({"exec", "--buffer", "a=1G", "--buffer", "b=1G", "--timeout-ms", "200"}, packet, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "deadline passed")) << r.err;
  EXPECT_TRUE(contains(r.err, "copy_window")) << r.err;  // the diagnosis names the packet
  // Start-up (allocating and zeroing 2 GiB) + deadline + grace.
  EXPECT_LT(r.seconds, 0.2 + 2.0 + 1.5) << r.err;
}

}  // namespace
