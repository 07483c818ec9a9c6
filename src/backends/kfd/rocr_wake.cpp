// src/backends/kfd/rocr_wake.cpp - see rocr_wake.hpp.
#include "backends/kfd/rocr_wake.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "backends/kfd/kfd_policy.hpp"

namespace conccl::kfd::detail {

using namespace hsa_abi;

// hsa.h's signatures, enums passed as int (C enums of int size).
struct RocrRuntime::Table {
  StatusCode (*init)();
  StatusCode (*shut_down)();
  StatusCode (*system_get_info)(int attribute, void* value);
  StatusCode (*signal_create)(SignalValue initial, uint32_t num_consumers, const Agent* consumers, Signal* out);
  StatusCode (*signal_destroy)(Signal s);
  SignalValue (*signal_load_scacquire)(Signal s);
  SignalValue (*signal_wait_scacquire)(Signal s, int condition, SignalValue compare, uint64_t timeout_hint,
                                       int wait_state);
};

namespace {

template <typename F>
bool find(void* h, const char* name, F* out, std::string* missing) {
  void* p = dlsym(h, name);
  if (!p) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  std::memcpy(out, &p, sizeof p);  // object pointer to function pointer (POSIX guarantees it works)
  return true;
}

std::string status_text(StatusCode s) { return "hsa_status_t " + hex(static_cast<uint32_t>(s)); }

}  // namespace

std::shared_ptr<RocrRuntime> RocrRuntime::open(std::string* why) {
  void* h = nullptr;
  const char* name = nullptr;
  for (const char* n : kNames) {
    h = dlopen(n, RTLD_LAZY | RTLD_NOLOAD);  // only if already in the process: never load ROCr
    if (h) {
      name = n;
      break;
    }
  }
  if (!h) {
    *why = "no libhsa-runtime64 in the process";
    return nullptr;
  }
  auto t = std::make_unique<Table>();
  std::string missing;
  bool all = true;
  all &= find(h, "hsa_init", &t->init, &missing);
  all &= find(h, "hsa_shut_down", &t->shut_down, &missing);
  all &= find(h, "hsa_system_get_info", &t->system_get_info, &missing);
  all &= find(h, "hsa_signal_create", &t->signal_create, &missing);
  all &= find(h, "hsa_signal_destroy", &t->signal_destroy, &missing);
  all &= find(h, "hsa_signal_load_scacquire", &t->signal_load_scacquire, &missing);
  all &= find(h, "hsa_signal_wait_scacquire", &t->signal_wait_scacquire, &missing);
  if (!all) {
    *why = std::string(name) + " in the process lacks " + missing + " (hsa-runtime older than ROCm 4.0?)";
    dlclose(h);
    return nullptr;
  }
  const StatusCode si = t->init();
  if (si != kSuccess) {
    *why = std::string("hsa_init of ") + name + " failed (" + status_text(si) + ")";
    dlclose(h);
    return nullptr;
  }
  uint64_t freq = 0;
  const StatusCode sf = t->system_get_info(kTimestampFrequency, &freq);
  if (sf != kSuccess || freq == 0) {
    *why = std::string("hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY) of ") + name + " failed (" +
           (sf != kSuccess ? status_text(sf) : std::string("0 Hz")) + ")";
    t->shut_down();
    dlclose(h);
    return nullptr;
  }
  return std::shared_ptr<RocrRuntime>(new RocrRuntime(h, std::move(t), freq));
}

RocrRuntime::RocrRuntime(void* handle, std::unique_ptr<Table> table, uint64_t ticks_per_second)
    : handle_(handle), fn_(std::move(table)), ticks_per_second_(ticks_per_second) {}

RocrRuntime::~RocrRuntime() {
  fn_->shut_down();  // pairs with our one hsa_init (ROCr counts them)
  dlclose(handle_);
}

Result<Signal> RocrRuntime::create_signal() const {
  Signal s{0};
  const StatusCode st = fn_->signal_create(0, 0, nullptr, &s);
  if (st != kSuccess || s.handle == 0)
    return error(Code::resource_exhausted, "hsa_signal_create failed (" + status_text(st) +
                                               "): the hsa-runtime is out of signals or memory; destroy unused "
                                               "queues");
  return s;
}

void RocrRuntime::destroy_signal(Signal s) const { fn_->signal_destroy(s); }

SignalValue RocrRuntime::load(Signal s) const { return fn_->signal_load_scacquire(s); }

SignalValue RocrRuntime::wait_gte(Signal s, SignalValue v, std::chrono::nanoseconds timeout) const {
  // Timeouts are in ticks of the system timestamp (hsa.h); 128-bit so that
  // long timeouts at GHz frequencies do not overflow.
  const unsigned __int128 ticks =
      static_cast<unsigned __int128>(std::max<int64_t>(timeout.count(), 0)) * ticks_per_second_ / 1000000000u;
  const uint64_t hint = ticks > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(ticks);
  return fn_->signal_wait_scacquire(s, kConditionGte, v, hint, kWaitStateBlocked);
}

// ---------------------------------------------------------------------------

Result<std::unique_ptr<RocrEvent>> RocrEvent::create(std::shared_ptr<const RocrRuntime> runtime) {
  Result<Signal> s = runtime->create_signal();
  if (!s.ok()) return s.status();
  return std::unique_ptr<RocrEvent>(new RocrEvent(std::move(runtime), *s));
}

RocrEvent::~RocrEvent() { runtime_->destroy_signal(signal_); }

uint64_t RocrEvent::mailbox_va() const {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(signal_.handle + kMailboxOffset))
      .load(std::memory_order_relaxed);
}

uint32_t RocrEvent::event_id() const {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(signal_.handle + kEventIdOffset))
      .load(std::memory_order_relaxed);
}

uint64_t RocrEvent::count() const {
  const SignalValue v = runtime_->load(signal_);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

Status RocrEvent::wait(uint64_t target, Deadline deadline) {
  while (count() < target) {
    if (deadline.expired())
      return error(Code::timeout, "ROCr signal " + hex(signal_.handle) + " (event " + std::to_string(event_id()) +
                                      "): " + std::to_string(count()) + " wake-ups, " + std::to_string(target) +
                                      " awaited, before the deadline");
    (void)runtime_->wait_gte(signal_, static_cast<SignalValue>(target),
                             std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(100)));
  }
  return Status();
}

Status RocrEvent::record(CommandBuffer& cb) const {
  CONCCL_RETURN_IF_ERROR(record_wake_rocr(cb, value_va(), event_id(), mailbox_va()));
  armed_.fetch_add(1, std::memory_order_acq_rel);
  return Status();
}

WakeEvent::Sleep RocrEvent::sleep_for_wake(Deadline deadline) {
  const uint64_t seen = count();
  if (seen >= armed_.load(std::memory_order_acquire)) return Sleep::nothing_pending;
  const auto slice = std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(100));
  if (slice.count() <= 0) return Sleep::slept_out;
  const SignalValue now = runtime_->wait_gte(signal_, static_cast<SignalValue>(seen + 1), slice);
  return now > static_cast<SignalValue>(seen) ? Sleep::raised : Sleep::slept_out;
}

void RocrEvent::forget_pending_wakes() {
  // Lowers armed_ to what the engine has raised; a wake recorded meanwhile by
  // another thread may be forgotten too, which only makes its waiter nap.
  armed_.store(count(), std::memory_order_release);
}

}  // namespace conccl::kfd::detail
