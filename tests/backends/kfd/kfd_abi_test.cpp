// tests/backends/kfd/kfd_abi_test.cpp - the policy's mirrors of libhsakmt's types
// against the header this build uses (built only when libhsakmt is found).
#if defined(CONCCL_HSAKMT_NESTED_HEADER)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include <gtest/gtest.h>

#include "backends/kfd/kfd_policy.hpp"

namespace {

using conccl::kfd::MemUse;

HsaMemFlags real(const conccl::kfd::MemFlags& f) {
  HsaMemFlags m;
  m.Value = 0;
  m.ui32.NonPaged = f.non_paged;
  m.ui32.CachePolicy = f.cache_policy;
  m.ui32.ReadOnly = f.read_only;
  m.ui32.PageSize = f.page_size;
  m.ui32.HostAccess = f.host_access;
  m.ui32.NoSubstitute = f.no_substitute;
  m.ui32.ExecuteAccess = f.execute_access;
  m.ui32.CoarseGrain = f.coarse_grain;
  m.ui32.NoNUMABind = f.no_numa_bind;
  m.ui32.Uncached = f.uncached;
  return m;
}

TEST(KfdAbi, MemFlagBitsMatchTheHeader) {
  for (MemUse u : {MemUse::ring, MemUse::host, MemUse::device, MemUse::device_hidden}) {
    const conccl::kfd::MemFlags f = conccl::kfd::mem_flags_for(u);
    EXPECT_EQ(f.bits(), real(f).Value) << conccl::kfd::mem_use_name(u);
  }
  // Every single field, one at a time.
  conccl::kfd::MemFlags f;
  for (int field = 0; field < 10; ++field) {
    f = {};
    switch (field) {
      case 0: f.non_paged = true; break;
      case 1: f.cache_policy = 2; break;
      case 2: f.read_only = true; break;
      case 3: f.page_size = 3; break;
      case 4: f.host_access = true; break;
      case 5: f.no_substitute = true; break;
      case 6: f.execute_access = true; break;
      case 7: f.coarse_grain = true; break;
      case 8: f.no_numa_bind = true; break;
      case 9: f.uncached = true; break;
    }
    EXPECT_EQ(f.bits(), real(f).Value) << "field " << field;
  }
}

TEST(KfdAbi, EnumsMatchTheHeader) {
  EXPECT_EQ(static_cast<uint32_t>(HSA_QUEUE_SDMA), static_cast<uint32_t>(conccl::kfd::ThunkQueueType::sdma));
  EXPECT_EQ(static_cast<uint32_t>(HSA_QUEUE_SDMA_XGMI), static_cast<uint32_t>(conccl::kfd::ThunkQueueType::sdma_xgmi));
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
  EXPECT_EQ(static_cast<uint32_t>(HSA_QUEUE_SDMA_BY_ENG_ID),
            static_cast<uint32_t>(conccl::kfd::ThunkQueueType::sdma_by_eng_id));
#endif
  const std::pair<int, conccl::kfd::KmtStatus> statuses[] = {
      {HSAKMT_STATUS_SUCCESS, conccl::kfd::KmtStatus::success},
      {HSAKMT_STATUS_ERROR, conccl::kfd::KmtStatus::error},
      {HSAKMT_STATUS_DRIVER_MISMATCH, conccl::kfd::KmtStatus::driver_mismatch},
      {HSAKMT_STATUS_INVALID_PARAMETER, conccl::kfd::KmtStatus::invalid_parameter},
      {HSAKMT_STATUS_NO_MEMORY, conccl::kfd::KmtStatus::no_memory},
      {HSAKMT_STATUS_OUT_OF_RESOURCES, conccl::kfd::KmtStatus::out_of_resources},
      {HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED, conccl::kfd::KmtStatus::kernel_io_channel_not_opened},
      {HSAKMT_STATUS_KERNEL_ALREADY_OPENED, conccl::kfd::KmtStatus::kernel_already_opened},
      {HSAKMT_STATUS_WAIT_TIMEOUT, conccl::kfd::KmtStatus::wait_timeout},
      {HSAKMT_STATUS_MEMORY_ALREADY_REGISTERED, conccl::kfd::KmtStatus::memory_already_registered},
      {HSAKMT_STATUS_MEMORY_ALIGNMENT, conccl::kfd::KmtStatus::memory_alignment},
  };
  for (auto [h, ours] : statuses) EXPECT_EQ(h, static_cast<int>(ours));
  EXPECT_EQ(static_cast<uint32_t>(HSA_IOLINK_TYPE_XGMI), conccl::kfd::kLinkTypeXgmi);
  EXPECT_EQ(static_cast<uint32_t>(HSA_IOLINKTYPE_PCIEXPRESS), conccl::kfd::kLinkTypePcie);
}

TEST(KfdAbi, BuildDescriptionSaysWhatWasDetected) {
  const std::string d = conccl::kfd::build_description();
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
  EXPECT_NE(d.find("with hsaKmtCreateQueueExt"), std::string::npos) << d;
#else
  EXPECT_NE(d.find("without hsaKmtCreateQueueExt"), std::string::npos) << d;
#endif
}

}  // namespace
