// tests/c_api/c_api_misuse_test.cpp - the C API under misuse (issue #24's
// adversarial classes): stale, doubled and mixed-up handles, any order of
// destruction, buffer structs that were freed, belong to another device or
// were altered, plans whose buffers were freed, the NCCL-shaped cache after a
// reallocation at the same address, signals of another device, and messages
// that name the C function. Each case crashed, wrote into the wrong memory or
// returned OK before the handle table and the buffer records.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "c_api/c_api_ranks.hpp"
#include "conccl/conccl.h"

namespace {

std::string last() { return conccl_last_error(); }

using capitest::open_emu;

std::vector<uint8_t> random_bytes(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

TEST(CApiMisuse, StaleAndMixedUpHandlesAreErrors) {
  conccl_device_t d = open_emu();
  int ids[16], count = 0;
  ASSERT_EQ(conccl_device_engines(d, 0, ids, 16, &count), CONCCL_OK);
  conccl_queue_t q = nullptr;
  ASSERT_EQ(conccl_queue_create(d, 0, ids[0], nullptr, &q), CONCCL_OK) << last();
  conccl_signal_t s = nullptr;
  ASSERT_EQ(conccl_signal_create(d, 3, &s), CONCCL_OK) << last();

  // A queue handle where a signal is expected.
  EXPECT_EQ(conccl_signal_wait(reinterpret_cast<conccl_signal_t>(q), 1, 10), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("a queue handle was given where a signal handle is expected"), std::string::npos) << last();
  // A pointer that was never a handle.
  int junk = 0;
  EXPECT_EQ(conccl_queue_submit(reinterpret_cast<conccl_queue_t>(&junk), 10, nullptr), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("not a ConCCL queue handle"), std::string::npos) << last();
  // A pointer whose bits 24..31 happen to hold a kind's number (ASLR makes
  // that byte random) is still named as a foreign pointer, never as a handle
  // of that kind.
  for (uint64_t kind = 1; kind <= 7; ++kind) {
    const uint64_t fake = 0x00007f0000000001ull | (kind << 24);
    EXPECT_EQ(conccl_queue_submit(reinterpret_cast<conccl_queue_t>(static_cast<uintptr_t>(fake)), 10, nullptr),
              CONCCL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(last().find("not a ConCCL queue handle"), std::string::npos) << kind << ": " << last();
  }

  // Use after destroy, and a double destroy.
  ASSERT_EQ(conccl_queue_destroy(q), CONCCL_OK) << last();
  EXPECT_EQ(conccl_queue_copy(q, 0x1000, 0x2000, 64), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("queue handle was destroyed"), std::string::npos) << last();
  EXPECT_EQ(conccl_queue_destroy(q), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(conccl_queue_pending_bytes(q), 0u);
  EXPECT_NE(last().find("destroyed"), std::string::npos) << last();
  ASSERT_EQ(conccl_signal_destroy(s), CONCCL_OK);
  EXPECT_EQ(conccl_signal_value(s), 0u);
  EXPECT_NE(last().find("signal handle was destroyed"), std::string::npos) << last();
  EXPECT_EQ(conccl_signal_add(s, 1), CONCCL_ERR_INVALID_ARGUMENT);

  // A new object in the freed slot does not answer to the old handle.
  conccl_signal_t s2 = nullptr;
  ASSERT_EQ(conccl_signal_create(d, 9, &s2), CONCCL_OK);
  EXPECT_NE(s2, s);
  EXPECT_EQ(conccl_signal_value(s), 0u) << "the stale handle must not reach the new signal";
  EXPECT_EQ(conccl_signal_value(s2), 9u);

  // Children outliving their device: closed with it, their handles dead.
  conccl_queue_t q2 = nullptr;
  ASSERT_EQ(conccl_queue_create(d, 1, ids[1], nullptr, &q2), CONCCL_OK) << last();
  ASSERT_EQ(conccl_device_close(d), CONCCL_OK) << last();
  EXPECT_EQ(conccl_queue_destroy(q2), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(conccl_signal_destroy(s2), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(conccl_device_close(d), CONCCL_ERR_INVALID_ARGUMENT) << "closed twice";
  int n = 0;
  EXPECT_EQ(conccl_device_gpu_count(d, &n), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(conccl_device_close(nullptr), CONCCL_OK) << "NULL is a no-op";
}

TEST(CApiMisuse, ErrorsNameTheCFunction) {
  EXPECT_EQ(conccl_queue_copy(nullptr, 0, 0, 8), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with(last(), "conccl_queue_copy: ")) << last();
  EXPECT_EQ(conccl_device_open(nullptr, nullptr), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with(last(), "conccl_device_open: ")) << last();
  conccl_unique_id id{};
  char small[8];
  EXPECT_EQ(conccl_unique_id_to_string(&id, small, sizeof small), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(starts_with(last(), "conccl_unique_id_to_string: ")) << last();
  EXPECT_EQ(last().find("operator()"), std::string::npos) << last();
  // The printable id is 43 characters: 44 bytes hold it with its NUL.
  ASSERT_EQ(conccl_get_unique_id(&id), CONCCL_OK);
  char text[44];
  ASSERT_EQ(conccl_unique_id_to_string(&id, text, sizeof text), CONCCL_OK) << last();
  EXPECT_EQ(std::strlen(text), 43u);
  EXPECT_EQ(conccl_unique_id_to_string(&id, text, 43), CONCCL_ERR_INVALID_ARGUMENT);
}

TEST(CApiMisuse, BufferStructsAreCheckedAgainstTheAllocation) {
  conccl_device_t d = open_emu();
  conccl_device_t other = open_emu("preset=small");
  const size_t n = 8192;
  conccl_buffer a{}, b{}, foreign{};
  ASSERT_EQ(conccl_buffer_alloc(d, 0, n, CONCCL_MEM_HOST, &a), CONCCL_OK) << last();
  ASSERT_EQ(conccl_buffer_alloc(d, 0, n, CONCCL_MEM_HOST, &b), CONCCL_OK) << last();
  ASSERT_EQ(conccl_buffer_alloc(other, 0, n, CONCCL_MEM_HOST, &foreign), CONCCL_OK) << last();
  const std::vector<uint8_t> data = random_bytes(n, 11), bdata = random_bytes(n, 12);
  ASSERT_EQ(conccl_buffer_upload(d, &a, 0, data.data(), n, 5000), CONCCL_OK) << last();
  ASSERT_EQ(conccl_buffer_upload(d, &b, 0, bdata.data(), n, 5000), CONCCL_OK) << last();

  // Zero bytes with NULL are allowed (and clean under UBSan).
  EXPECT_EQ(conccl_buffer_upload(d, &a, 0, nullptr, 0, 5000), CONCCL_OK) << last();
  EXPECT_EQ(conccl_buffer_download(d, nullptr, &a, 0, 0, 5000), CONCCL_OK) << last();

  // An enlarged size would reach the neighbour.
  conccl_buffer big = a;
  big.size = 2 * n;
  std::vector<uint8_t> junk = random_bytes(2 * n, 13);
  EXPECT_EQ(conccl_buffer_upload(d, &big, 0, junk.data(), 2 * n, 5000), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("size"), std::string::npos) << last();
  // A bogus host pointer.
  conccl_buffer bogus = a;
  bogus.host = reinterpret_cast<void*>(0x10);
  EXPECT_EQ(conccl_buffer_upload(d, &bogus, 0, junk.data(), 64, 5000), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("host pointer"), std::string::npos) << last();
  // Another device's buffer.
  EXPECT_EQ(conccl_buffer_upload(d, &foreign, 0, junk.data(), 64, 5000), CONCCL_ERR_NOT_FOUND);
  EXPECT_NE(last().find("another device"), std::string::npos) << last();
  EXPECT_EQ(conccl_buffer_free(d, &foreign), CONCCL_ERR_NOT_FOUND);
  // A sub-range moves va and host together and is accepted.
  conccl_buffer sub = a;
  sub.va += 100;
  sub.host = static_cast<uint8_t*>(sub.host) + 100;
  sub.size = 200;
  std::vector<uint8_t> got(200);
  ASSERT_EQ(conccl_buffer_download(d, got.data(), &sub, 0, 200, 5000), CONCCL_OK) << last();
  EXPECT_EQ(std::memcmp(got.data(), data.data() + 100, 200), 0);
  EXPECT_EQ(conccl_buffer_free(d, &sub), CONCCL_ERR_INVALID_ARGUMENT) << "free takes the whole buffer";

  // The neighbour b is untouched by all of the above.
  std::vector<uint8_t> bback(n);
  ASSERT_EQ(conccl_buffer_download(d, bback.data(), &b, 0, n, 5000), CONCCL_OK);
  EXPECT_EQ(bback, bdata);

  // Free, then a new buffer at the same address: the stale struct names
  // nothing (ABA), and the new buffer keeps its bytes.
  const conccl_buffer stale = a;
  ASSERT_EQ(conccl_buffer_free(d, &a), CONCCL_OK) << last();
  EXPECT_EQ(conccl_buffer_upload(d, &stale, 0, junk.data(), 64, 5000), CONCCL_ERR_NOT_FOUND);
  conccl_buffer again{};
  ASSERT_EQ(conccl_buffer_alloc(d, 0, n, CONCCL_MEM_HOST, &again), CONCCL_OK);
  ASSERT_EQ(again.va, stale.va) << "the emulator's first-fit arena reuses the address";
  EXPECT_NE(again.id, stale.id);
  const std::vector<uint8_t> adata = random_bytes(n, 14);
  ASSERT_EQ(conccl_buffer_upload(d, &again, 0, adata.data(), n, 5000), CONCCL_OK);
  EXPECT_EQ(conccl_buffer_free(d, &stale), CONCCL_ERR_NOT_FOUND) << "a stale struct must not free the newer buffer";
  std::vector<uint8_t> aback(n);
  ASSERT_EQ(conccl_buffer_download(d, aback.data(), &again, 0, n, 5000), CONCCL_OK) << last();
  EXPECT_EQ(aback, adata);

  EXPECT_EQ(conccl_buffer_free(d, &again), CONCCL_OK);
  EXPECT_EQ(conccl_buffer_free(d, &b), CONCCL_OK);
  EXPECT_EQ(conccl_device_close(other), CONCCL_OK) << "closing frees the buffers left";
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK);
}

TEST(CApiMisuse, SignalOfAnotherDeviceIsRefused) {
  conccl_device_t d = open_emu(), other = open_emu();
  int ids[16], count = 0;
  ASSERT_EQ(conccl_device_engines(d, 0, ids, 16, &count), CONCCL_OK);
  conccl_queue_t q = nullptr;
  ASSERT_EQ(conccl_queue_create(d, 0, ids[0], nullptr, &q), CONCCL_OK);
  conccl_signal_t mine = nullptr, theirs = nullptr;
  ASSERT_EQ(conccl_signal_create(d, 0, &mine), CONCCL_OK);
  ASSERT_EQ(conccl_signal_create(other, 0, &theirs), CONCCL_OK);
  EXPECT_EQ(conccl_queue_signal_add(q, theirs, 1), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("belongs to another device"), std::string::npos) << last();
  EXPECT_EQ(conccl_queue_wait_signal(q, theirs, 1), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(conccl_queue_wait_ge(q, theirs, 1), CONCCL_ERR_INVALID_ARGUMENT) << "the same call under its vocabulary name";
  EXPECT_EQ(conccl_queue_pending_bytes(q), 0u) << "nothing recorded";
  ASSERT_EQ(conccl_queue_signal_add(q, mine, 5), CONCCL_OK);
  uint64_t t = 0;
  ASSERT_EQ(conccl_queue_submit(q, 1000, &t), CONCCL_OK);
  ASSERT_EQ(conccl_signal_wait(mine, 5, 5000), CONCCL_OK) << last();
  EXPECT_EQ(conccl_signal_value(theirs), 0u);
  EXPECT_EQ(conccl_device_close(other), CONCCL_OK);
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK) << "closing takes the queue and signal with it";
}

struct Comm4 {
  conccl_device_t d = nullptr;
  conccl_comm_t comm = nullptr;
  static constexpr size_t kChunk = 4096 + 8;
  std::vector<conccl_buffer> send{4}, recv{4};
  std::vector<std::vector<uint8_t>> data;
  Comm4() {
    d = open_emu();
    const int gpus[4] = {0, 1, 2, 3};
    conccl_comm_options co;
    conccl_comm_options_init(&co);
    co.timeout_ms = 5000;
    EXPECT_EQ(conccl_comm_create(d, gpus, 4, &co, &comm), CONCCL_OK) << last();
    for (int r = 0; r < 4; ++r) {
      data.push_back(random_bytes(kChunk, 100 + r));
      EXPECT_EQ(conccl_buffer_alloc(d, r, kChunk, CONCCL_MEM_DEVICE, &send[r]), CONCCL_OK);
      EXPECT_EQ(conccl_buffer_alloc(d, r, kChunk * 4, CONCCL_MEM_DEVICE, &recv[r]), CONCCL_OK);
      EXPECT_EQ(conccl_buffer_upload(d, &send[r], 0, data[r].data(), kChunk, 5000), CONCCL_OK);
    }
  }
  conccl_collective_args all_gather() { return capitest::all_gather_args(send.data(), recv.data(), 4, kChunk); }
  void expect_gathered() { capitest::expect_gathered(d, recv, data, kChunk); }
};

TEST(CApiMisuse, CommunicatorDestroyedBeforeItsPlan) {
  Comm4 c;
  conccl_collective_args a = c.all_gather();
  conccl_plan_t plan = nullptr, running = nullptr;
  ASSERT_EQ(conccl_plan_create(c.comm, &a, &plan), CONCCL_OK) << last();
  ASSERT_EQ(conccl_plan_create(c.comm, &a, &running), CONCCL_OK) << last();
  ASSERT_EQ(conccl_plan_launch(plan, 5000), CONCCL_OK) << last();
  ASSERT_EQ(conccl_plan_wait(plan, 5000), CONCCL_OK) << last();
  c.expect_gathered();
  a.prelaunch = 1;
  conccl_plan_t gated = nullptr;
  ASSERT_EQ(conccl_plan_create(c.comm, &a, &gated), CONCCL_OK) << last();
  ASSERT_EQ(conccl_plan_prelaunch(gated, 5000), CONCCL_OK) << last();  // never released by the caller
  ASSERT_EQ(conccl_plan_launch(running, 5000), CONCCL_OK) << last();   // never waited for

  ASSERT_EQ(conccl_comm_destroy(c.comm), CONCCL_OK) << last();
  for (conccl_plan_t p : {plan, running, gated}) {
    EXPECT_EQ(conccl_plan_launch(p, 1000), CONCCL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(last().find("Communicator was destroyed"), std::string::npos) << last();
    EXPECT_EQ(conccl_plan_wait(p, 1000), CONCCL_ERR_INVALID_ARGUMENT);
    uint64_t addr = 0, value = 0;
    EXPECT_EQ(conccl_plan_completion(p, 0, &addr, &value), CONCCL_ERR_INVALID_ARGUMENT);
    size_t need = 0;
    EXPECT_EQ(conccl_plan_describe(p, nullptr, 0, &need), CONCCL_OK);
  }
  c.expect_gathered();  // the launches the destruction ended left their data in place
  EXPECT_EQ(conccl_plan_destroy(plan), CONCCL_OK) << last();
  EXPECT_EQ(conccl_plan_destroy(running), CONCCL_OK) << last();
  EXPECT_EQ(conccl_comm_destroy(c.comm), CONCCL_ERR_INVALID_ARGUMENT) << "destroyed twice";
  // The device closed with a plan still alive: the plan stays a handle that
  // says what happened, and is destroyed after the device.
  EXPECT_EQ(conccl_device_close(c.d), CONCCL_OK) << last();
  EXPECT_EQ(conccl_plan_release(gated), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(conccl_plan_destroy(gated), CONCCL_OK) << last();
  EXPECT_EQ(conccl_plan_destroy(gated), CONCCL_ERR_INVALID_ARGUMENT);
}

TEST(CApiMisuse, PlansRefuseFreedBuffers) {
  Comm4 c;
  conccl_collective_args a = c.all_gather();
  conccl_plan_t plan = nullptr;
  ASSERT_EQ(conccl_plan_create(c.comm, &a, &plan), CONCCL_OK) << last();
  // Free rank 2's receive buffer and put a smaller one and a guard where it was.
  const conccl_buffer old = c.recv[2];
  ASSERT_EQ(conccl_buffer_free(c.d, &c.recv[2]), CONCCL_OK);
  conccl_buffer smaller{}, guard{};
  ASSERT_EQ(conccl_buffer_alloc(c.d, 2, c.kChunk, CONCCL_MEM_DEVICE, &smaller), CONCCL_OK);
  ASSERT_EQ(conccl_buffer_alloc(c.d, 2, 3 * c.kChunk, CONCCL_MEM_DEVICE, &guard), CONCCL_OK);
  ASSERT_EQ(smaller.va, old.va) << "the emulator's first-fit arena reuses the address";
  const std::vector<uint8_t> gdata = random_bytes(3 * c.kChunk, 7);
  ASSERT_EQ(conccl_buffer_upload(c.d, &guard, 0, gdata.data(), gdata.size(), 5000), CONCCL_OK);

  // At launch: the freed buffer is named, nothing is written.
  EXPECT_EQ(conccl_plan_launch(plan, 5000), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("recv[2]"), std::string::npos) << last();
  EXPECT_NE(last().find("was freed"), std::string::npos) << last();
  // At plan time: the stale struct is refused.
  EXPECT_EQ(conccl_plan_create(c.comm, &a, &plan), CONCCL_ERR_NOT_FOUND);
  EXPECT_NE(last().find("args->recv[2]"), std::string::npos) << last();

  // The NCCL-shaped call with the old struct: refused; with the smaller
  // buffer: planned anew (not the cached plan of the old one) and refused
  // as too small. The guard keeps every byte.
  c.recv[2] = old;
  EXPECT_NE(conccl_all_gather(c.send.data(), c.recv.data(), c.kChunk, c.comm, nullptr), CONCCL_OK);
  c.recv[2] = smaller;
  EXPECT_NE(conccl_all_gather(c.send.data(), c.recv.data(), c.kChunk, c.comm, nullptr), CONCCL_OK);
  std::vector<uint8_t> gback(gdata.size());
  ASSERT_EQ(conccl_buffer_download(c.d, gback.data(), &guard, 0, gback.size(), 5000), CONCCL_OK);
  EXPECT_EQ(gback, gdata) << "nothing written past the smaller buffer";
  EXPECT_EQ(conccl_plan_destroy(plan), CONCCL_OK);
  EXPECT_EQ(conccl_device_close(c.d), CONCCL_OK);
}

// A caching allocator's pattern: all_gather into a buffer, free it, and get
// a smaller one at the same address: the cached plan of the first call must
// not run (it wrote 64 of 64 guard bytes past the new buffer and returned OK).
TEST(CApiMisuse, NcclShapedCacheAfterReallocationAtTheSameAddress) {
  Comm4 c;
  ASSERT_EQ(conccl_all_gather(c.send.data(), c.recv.data(), c.kChunk, c.comm, nullptr), CONCCL_OK) << last();
  c.expect_gathered();
  EXPECT_EQ(conccl_comm_cached_plans(c.comm), 1u);
  const conccl_buffer old = c.recv[1];
  ASSERT_EQ(conccl_buffer_free(c.d, &c.recv[1]), CONCCL_OK);
  conccl_buffer smaller{}, guard{};
  ASSERT_EQ(conccl_buffer_alloc(c.d, 1, 2 * c.kChunk, CONCCL_MEM_DEVICE, &smaller), CONCCL_OK);
  ASSERT_EQ(conccl_buffer_alloc(c.d, 1, 64, CONCCL_MEM_DEVICE, &guard), CONCCL_OK);
  ASSERT_EQ(smaller.va, old.va);
  ASSERT_LT(guard.va, old.va + old.size) << "the guard sits where the old plan would write";
  const std::vector<uint8_t> gdata = random_bytes(64, 8);
  ASSERT_EQ(conccl_buffer_upload(c.d, &guard, 0, gdata.data(), 64, 5000), CONCCL_OK);
  c.recv[1] = smaller;
  EXPECT_EQ(conccl_all_gather(c.send.data(), c.recv.data(), c.kChunk, c.comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT)
      << last();
  EXPECT_NE(last().find("recv[1] has " + std::to_string(2 * c.kChunk) + " bytes"), std::string::npos) << last();
  std::vector<uint8_t> gback(64);
  ASSERT_EQ(conccl_buffer_download(c.d, gback.data(), &guard, 0, 64, 5000), CONCCL_OK);
  EXPECT_EQ(gback, gdata) << "guard bytes overwritten by a stale cached plan";
  EXPECT_EQ(conccl_device_close(c.d), CONCCL_OK) << "the communicator goes with its device";
  EXPECT_EQ(conccl_comm_destroy(c.comm), CONCCL_ERR_INVALID_ARGUMENT);
}

}  // namespace
