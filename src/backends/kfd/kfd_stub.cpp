// src/backends/kfd/kfd_stub.cpp - the KFD device when ConCCL was built
// without libhsakmt. The sysfs parser and the policy (sysfs.cpp, policy.cpp)
// are still part of the build and tested; only opening a device needs the
// thunk.
#include "backends/kfd/kfd_policy.hpp"

namespace conccl::kfd {

bool built_with_libhsakmt() { return false; }

std::string build_description() { return "not built with libhsakmt"; }

Result<std::unique_ptr<KfdDevice>> open(const Options&) {
  return error(Code::unavailable,
               "the kfd backend was built without libhsakmt: install libhsakmt-dev (Debian/Ubuntu) or ROCm "
               "(set ROCM_PATH), and rebuild ConCCL; see docs/hardware.md");
}

}  // namespace conccl::kfd
