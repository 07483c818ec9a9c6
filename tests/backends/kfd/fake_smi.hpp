// tests/backends/kfd/fake_smi.hpp - KFD SMI event files as socket pairs: the
// watch (src/backends/kfd/kfd_smi.hpp) reads one end, the test writes the
// other what kfd_smi_events.c would queue, in its format.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "backends/kfd/kfd_smi.hpp"

namespace conccl::test {

class FakeSmi final : public conccl::kfd::SmiEvents {
 public:
  ~FakeSmi() override {
    for (auto& [id, fd] : kernel_ends) ::close(fd);
  }
  int open_client(uint32_t gpu_id, int* fd) override {
    if (refuse.count(gpu_id)) return EACCES;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return errno;
    kernel_ends[gpu_id] = sv[1];
    opened.push_back(gpu_id);
    *fd = sv[0];
    return 0;
  }
  void queue(uint32_t gpu_id, const std::string& text) {
    ASSERT_EQ(::write(kernel_ends.at(gpu_id), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  uint64_t mask_written(uint32_t gpu_id) {
    uint64_t m = 0;
    EXPECT_EQ(::read(kernel_ends.at(gpu_id), &m, sizeof m), static_cast<ssize_t>(sizeof m));
    return m;
  }
  std::map<uint32_t, int> kernel_ends;
  std::vector<uint32_t> opened;  // gpu ids in the order the watch asked
  std::map<uint32_t, bool> refuse;
};

}  // namespace conccl::test
