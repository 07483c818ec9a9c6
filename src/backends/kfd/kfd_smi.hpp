// src/backends/kfd/kfd_smi.hpp - GPU faults without a KFD event: KFD's SMI
// event files (AMDKFD_IOC_SMI_EVENTS, include/uapi/linux/kfd_ioctl.h; linux
// amdkfd kfd_smi_events.c). A KFD memory event would take the process's one
// events page, which a HIP initialised later needs (issue #31, item 1); an
// SMI event file needs none. Without CAP_SYS_ADMIN a client gets its own
// process's events, which is what the watch wants.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conccl/status.hpp"

namespace conccl::kfd {

// How the watch reaches KFD (tests: a fake whose files are socket pairs).
class SmiEvents {
 public:
  virtual ~SmiEvents() = default;
  // An event file for the GPU KFD calls `gpu_id` (its sysfs gpu_id), into
  // *fd; or an errno.
  virtual int open_client(uint32_t gpu_id, int* fd) = 0;
};
// The real one: its own /dev/kfd descriptor (the same KFD process as the
// thunk's: KFD keys processes by address space), then the ioctl.
std::shared_ptr<SmiEvents> real_smi_events(const std::string& device_path);

// What one line of an event file says about this process (`me`): a fault
// to report, or nothing (another process's fault, an event not watched, a
// line that does not parse). Lines are "<event hex> <text>": VMFAULT's text
// is "<pid hex>:<task name>", GPU_PRE_RESET's "<sequence hex>[ <cause>]".
std::optional<std::string> smi_fault_text(const std::string& line, pid_t me);

// One event file per GPU, VMFAULT and GPU_PRE_RESET enabled.
class SmiWatch {
 public:
  ~SmiWatch();
  // Opens a file for each GPU id; a GPU whose file cannot be opened is not
  // watched (the error says which, for the topology notes).
  Status open(SmiEvents& sys, const std::vector<uint32_t>& gpu_ids);
  bool watching() const;
  // Reads what has arrived (never blocks) and returns the fault of each
  // GPU found in it ("" = none), index by index as open() got them.
  std::vector<std::string> poll(pid_t me);

 private:
  std::vector<int> fds_;
  std::vector<std::string> partial_;  // a line not yet ended, per file
};

}  // namespace conccl::kfd
