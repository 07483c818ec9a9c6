// tests/backends/kfd/fake_kfd_fixture.hpp - what the tests of the KFD backend
// against fake_hsakmt share (kfd_fake_test.cpp, kfd_rocr_wake_test.cpp): render
// nodes that open, in a directory of their own; the fake reset to the MI300X
// fixture; the device's options on the fixture's sysfs tree; after each test,
// the check that the backend gave back everything it took; and a look into
// the topology's notes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "conccl/kfd.hpp"
#include "fake_hsakmt.hpp"

namespace fakekmt {

class FakeKfdTest : public ::testing::Test {
 protected:
  // dri_prefix: the name of the render nodes' directory, before the pid.
  explicit FakeKfdTest(std::string dri_prefix) : dri_prefix_(std::move(dri_prefix)) {}

  void SetUp() override {
    // Render nodes that open (the fixture's renderD128..184), in a temp dir.
    dri_ = std::filesystem::temp_directory_path() / (dri_prefix_ + std::to_string(::getpid()));
    std::filesystem::create_directories(dri_);
    for (int i = 0; i < 8; ++i) {
      std::FILE* f = std::fopen((dri_ / ("renderD" + std::to_string(128 + 8 * i))).c_str(), "w");
      ASSERT_NE(f, nullptr);
      std::fclose(f);
    }
    reset(mi300x());
  }
  void TearDown() override {
    std::filesystem::remove_all(dri_);
    // Everything the backend took, it gave back.
    const Stats s = stats();
    EXPECT_EQ(s.open_count, 0);
    EXPECT_EQ(s.live_queues, 0);
    EXPECT_EQ(s.live_events, 0);
    EXPECT_EQ(s.live_allocations, 0);
  }

  // The MI300X fixture (sysfs tree under KFD_FIXTURES, render nodes in dri_),
  // TRAP wake-ups as `trap`.
  conccl::kfd::Options fixture_options(conccl::kfd::Options::Trap trap) const {
    conccl::kfd::Options o;
    o.trap_wakeups = trap;
    o.sysfs_root = std::string(KFD_FIXTURES) + "/mi300x_spx/topology";
    o.device_path = "/dev/null";
    o.dri_dir = dri_.string();
    return o;
  }
  // The device, or nullptr (and a failure saying why).
  static std::unique_ptr<conccl::kfd::KfdDevice> open_device(const conccl::kfd::Options& o) {
    conccl::Result<std::unique_ptr<conccl::kfd::KfdDevice>> d = conccl::kfd::open(o);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return d.ok() ? std::move(d).value() : nullptr;
  }

  static bool contains(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }
  // The first of the topology's notes that holds `text`, or "".
  static std::string note_with(const conccl::Topology& t, const std::string& text) {
    for (const std::string& n : t.notes)
      if (contains(n, text)) return n;
    return "";
  }

  std::filesystem::path dri_;

 private:
  std::string dri_prefix_;
};

}  // namespace fakekmt
