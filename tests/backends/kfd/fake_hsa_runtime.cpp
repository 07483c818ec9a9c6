// tests/backends/kfd/fake_hsa_runtime.cpp - a stand-in for ROCm >= 6.3's
// libhsa-runtime64.so.1, built as a shared library of that name for
// test_kfd_fake (kfd_rocr_wake_test.cpp), which dlopen()s it before opening
// the KFD device so that the backend finds it with RTLD_NOLOAD.
//
// It has the seven entry points the KFD backend uses (rocr_wake.cpp) and
// exports no hsaKmt* function, like a ROCr whose libhsakmt is linked in
// privately, so the backend turns its own KFD events off. Signals are
// amd_signal_t-shaped (hsa/amd_hsa_signal.h of ROCR-Runtime: kind, value at
// +8, event_mailbox_ptr at +16, event_id at +24) in one static arena that
// the test maps for the fake engines (fakekmt::map_foreign), each with a
// mailbox word of its own; waits poll the value with short sleeps. Nothing
// here comes from ROCr. Built with FAKE_HSA_WITHOUT_WAIT, it lacks
// hsa_signal_wait_scacquire (an hsa-runtime the backend cannot use).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>

namespace {

struct SignalShape {  // amd_signal_t's first 64 bytes
  int64_t kind;
  int64_t value;
  uint64_t event_mailbox_ptr;
  uint32_t event_id;
  uint32_t reserved1;
  uint64_t start_ts, end_ts, queue_ptr;
  uint32_t reserved3[2];
};
static_assert(sizeof(SignalShape) == 64);

struct alignas(64) Slot {
  SignalShape sig;
  uint64_t mailbox;
  bool live;
  uint64_t last_mailbox;  // what the mailbox held when the signal was destroyed
};

constexpr int kSlots = 64;
constexpr uint32_t kFirstEventId = 0x700;  // far from the fake KFD's own event ids (1, 2, ...)
constexpr uint64_t kUnsignaled = ~0ull;    // an events-page slot nobody has signaled (kfd_events.c)
constexpr uint64_t kTicksPerSecond = 100000000;  // 100 MHz, as MI300's system timestamp

Slot g_slots[kSlots];
std::mutex g_mu;
int g_init_refs = 0, g_init_calls = 0, g_shut_down_calls = 0, g_blocked_waits = 0;

// A counter read under the lock.
int locked(const int& counter) {
  std::lock_guard<std::mutex> lock(g_mu);
  return counter;
}

int64_t load(const SignalShape* s) {
  return std::atomic_ref<int64_t>(const_cast<SignalShape*>(s)->value).load(std::memory_order_acquire);
}

}  // namespace

extern "C" {

// hsa.h's entry points (hsa_status_t: 0 success, 0x1000 HSA_STATUS_ERROR,
// 0x1001 INVALID_ARGUMENT, 0x100B NOT_INITIALIZED).
int hsa_init() {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_init_refs;
  ++g_init_calls;
  return 0;
}

int hsa_shut_down() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_refs == 0) return 0x100B;
  --g_init_refs;
  ++g_shut_down_calls;
  return 0;
}

int hsa_system_get_info(int attribute, void* value) {
  if (attribute != 3) return 0x1001;  // only HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY
  const uint64_t f = kTicksPerSecond;
  std::memcpy(value, &f, sizeof f);
  return 0;
}

int hsa_signal_create(int64_t initial, uint32_t num_consumers, const void* consumers, uint64_t* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_refs == 0) return 0x100B;
  if (num_consumers != 0 || consumers != nullptr) return 0x1001;  // the backend names none
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.live) continue;
    std::memset(&s.sig, 0, sizeof s.sig);
    s.sig.kind = 1;  // AMD_SIGNAL_KIND_USER
    s.sig.value = initial;
    s.mailbox = kUnsignaled;
    s.sig.event_mailbox_ptr = reinterpret_cast<uint64_t>(&s.mailbox);
    s.sig.event_id = kFirstEventId + static_cast<uint32_t>(i);
    s.live = true;
    *out = reinterpret_cast<uint64_t>(&s.sig);
    return 0;
  }
  return 0x1000;
}

int hsa_signal_destroy(uint64_t handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.live && reinterpret_cast<uint64_t>(&s.sig) == handle) {
      s.last_mailbox = std::atomic_ref<uint64_t>(s.mailbox).load(std::memory_order_acquire);
      s.live = false;
      return 0;
    }
  return 0x1001;
}

int64_t hsa_signal_load_scacquire(uint64_t handle) { return load(reinterpret_cast<const SignalShape*>(handle)); }

#if !defined(FAKE_HSA_WITHOUT_WAIT)
// Only GTE is needed; timeout_hint in ticks of kTicksPerSecond.
int64_t hsa_signal_wait_scacquire(uint64_t handle, int condition, int64_t compare, uint64_t timeout_hint,
                                  int /*wait_state*/) {
  const auto* s = reinterpret_cast<const SignalShape*>(handle);
  if (condition != 3) return load(s);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::nanoseconds(timeout_hint > UINT64_MAX / 10 ? INT64_MAX / 2 : timeout_hint * 10);
  bool slept = false;
  int64_t v = load(s);
  while (v < compare && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    slept = true;
    v = load(s);
  }
  if (slept) {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_blocked_waits;
  }
  return v;
}
#endif

// ---- test hooks (the test finds them with dlsym) ----

void fake_hsa_arena(uint64_t* base, uint64_t* bytes) {
  *base = reinterpret_cast<uint64_t>(g_slots);
  *bytes = sizeof g_slots;
}

void fake_hsa_reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_init_calls = g_shut_down_calls = g_blocked_waits = 0;
  for (Slot& s : g_slots) s.last_mailbox = 0;
}

int fake_hsa_live_signals() {
  std::lock_guard<std::mutex> lock(g_mu);
  int n = 0;
  for (const Slot& s : g_slots) n += s.live;
  return n;
}

int fake_hsa_init_refs() { return locked(g_init_refs); }
int fake_hsa_init_calls() { return locked(g_init_calls); }
int fake_hsa_shut_down_calls() { return locked(g_shut_down_calls); }
// Waits that found the condition false and slept at least once.
int fake_hsa_blocked_waits() { return locked(g_blocked_waits); }

// What the mailbox of the signal with this event id holds (live) or held
// when it was destroyed; ~0 (unsignaled) if never written.
uint64_t fake_hsa_mailbox(uint32_t event_id) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (event_id < kFirstEventId || event_id >= kFirstEventId + kSlots) return 0;
  Slot& s = g_slots[event_id - kFirstEventId];
  return s.live ? std::atomic_ref<uint64_t>(s.mailbox).load(std::memory_order_acquire) : s.last_mailbox;
}

}  // extern "C"
