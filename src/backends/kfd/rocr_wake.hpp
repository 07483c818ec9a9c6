// src/backends/kfd/rocr_wake.hpp - host waits that sleep on interrupt signals
// of the hsa-runtime (ROCr) already in the process (issue #31, item 1).
//
// Where ROCr carries its own libhsakmt (ROCm >= 6.3), KFD's one events page
// per process is ROCr's, so ConCCL creates no KFD event (policy.cpp
// decide_trap). ROCr's interrupt signals are KFD events of ROCr's thunk: an
// engine that adds to the signal's value, writes the event id to its mailbox
// and raises TRAP with that id wakes a thread sleeping in
// hsa_signal_wait_scacquire (ROCR-Runtime runtime/hsa-runtime/core/runtime/
// interrupt_signal.cpp; linux drivers/gpu/drm/amd/amdkfd/kfd_events.c looks
// the event up by the TRAP's context id and checks its mailbox slot). Both
// thunks open the same KFD process, so ConCCL's SDMA queues can raise ROCr's
// events.
//
// ConCCL never loads ROCr: it uses the entry points of a libhsa-runtime64
// that is already in the process, and none of its headers (the few types are
// declared below, from inc/hsa.h and inc/amd_hsa_signal.h of ROCR-Runtime).
// Internal to the KFD backend.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/kfd/wake_event.hpp"
#include "conccl/status.hpp"

namespace conccl::kfd::detail {

// The hsa-runtime ABI used here (ROCR-Runtime runtime/hsa-runtime/inc/hsa.h and
// inc/amd_hsa_signal.h; the 64-bit machine model).
namespace hsa_abi {
using StatusCode = int;  // hsa_status_t: HSA_STATUS_SUCCESS = 0
inline constexpr StatusCode kSuccess = 0;
struct Signal {  // hsa_signal_t: the address of an amd_signal_t
  uint64_t handle;
};
struct Agent {  // hsa_agent_t
  uint64_t handle;
};
using SignalValue = int64_t;                   // hsa_signal_value_t (large model)
inline constexpr int kTimestampFrequency = 3;  // hsa_system_info_t ..._TIMESTAMP_FREQUENCY (a uint64_t, Hz)
inline constexpr int kConditionGte = 3;        // hsa_signal_condition_t: EQ 0, NE 1, LT 2, GTE 3
inline constexpr int kWaitStateBlocked = 0;    // hsa_wait_state_t HSA_WAIT_STATE_BLOCKED
// amd_signal_t (amd_hsa_signal.h): int64 kind, int64 value, uint64
// event_mailbox_ptr, uint32 event_id, ... (the same offsets as HsaSignalView,
// conccl/signal.hpp).
inline constexpr uint64_t kValueOffset = 8;
inline constexpr uint64_t kMailboxOffset = 16;
inline constexpr uint64_t kEventIdOffset = 24;
}  // namespace hsa_abi

// The entry points of the libhsa-runtime64 in this process, with the
// runtime initialised (hsa_init, reference-counted in ROCr) while this
// object lives; its destructor calls hsa_shut_down once. Shared by the
// device's context and every RocrEvent, so ROCr stays initialised until the
// last signal is destroyed.
class RocrRuntime {
 public:
  // The sonames looked up, in order.
  static constexpr const char* kNames[] = {"libhsa-runtime64.so.1", "libhsa-runtime64.so"};

  // Null, with *why set (a sentence for the topology notes), when no
  // libhsa-runtime64 is loaded, an entry point is missing, or hsa_init or the
  // timestamp frequency fails. Never loads the library itself (RTLD_NOLOAD).
  static std::shared_ptr<RocrRuntime> open(std::string* why);
  ~RocrRuntime();
  RocrRuntime(const RocrRuntime&) = delete;
  RocrRuntime& operator=(const RocrRuntime&) = delete;

  // A signal of initial value 0 with no consumers named, which ROCr makes an
  // interrupt signal (a KFD event of its own) unless interrupts are off
  // (HSA_ENABLE_INTERRUPT=0: then it has no mailbox).
  Result<hsa_abi::Signal> create_signal() const;
  void destroy_signal(hsa_abi::Signal s) const;
  hsa_abi::SignalValue load(hsa_abi::Signal s) const;
  // Sleeps (HSA_WAIT_STATE_BLOCKED) until value >= v or about `timeout`;
  // returns the value seen (ROCr may return early: callers re-check).
  hsa_abi::SignalValue wait_gte(hsa_abi::Signal s, hsa_abi::SignalValue v, std::chrono::nanoseconds timeout) const;

 private:
  struct Table;
  explicit RocrRuntime(void* handle, std::unique_ptr<Table> table, uint64_t ticks_per_second);
  void* handle_;
  std::unique_ptr<Table> fn_;
  uint64_t ticks_per_second_;
};

// A queue's host wake-up through one ROCr signal: record() appends an SDMA
// ATOMIC add of 1 to its value, then (interrupt signals) the mailbox FENCE
// and TRAP of its event id; count() is its value; waits sleep in
// hsa_signal_wait_scacquire.
class RocrEvent final : public WakeEvent {
 public:
  static Result<std::unique_ptr<RocrEvent>> create(std::shared_ptr<const RocrRuntime> runtime);
  ~RocrEvent() override;
  RocrEvent(const RocrEvent&) = delete;
  RocrEvent& operator=(const RocrEvent&) = delete;

  uint64_t count() const override;
  uint32_t last_context() const override { return event_id(); }
  Status wait(uint64_t target, Deadline deadline) override;
  Status record(CommandBuffer& cb) const override;
  Sleep sleep_for_wake(Deadline deadline) override;
  void forget_pending_wakes() override;

  // The amd_signal_t's fields (ROCr's memory, GPU-mapped by ROCr).
  uint64_t value_va() const { return signal_.handle + hsa_abi::kValueOffset; }
  uint64_t mailbox_va() const;
  uint32_t event_id() const;

 private:
  RocrEvent(std::shared_ptr<const RocrRuntime> runtime, hsa_abi::Signal s)
      : runtime_(std::move(runtime)), signal_(s) {}
  std::shared_ptr<const RocrRuntime> runtime_;
  hsa_abi::Signal signal_;
  // Wakes recorded so far. The value counts those the engine ran, so a
  // sleeper knows whether one is still to come (value < armed).
  mutable std::atomic<uint64_t> armed_{0};
};

}  // namespace conccl::kfd::detail
