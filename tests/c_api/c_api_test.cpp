// tests/c_api/c_api_test.cpp - the C API: every error comes back as a status
// with a message, structs are size-checked, handles work end to end, and the
// NCCL-shaped calls cache their plans. (The examples and the Python package
// exercise it too: tests/install, tests/python.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "c_api/c_api_ranks.hpp"
#include "conccl/conccl.h"
#include "multiproc/fork_ranks.hpp"

namespace {

std::string last() { return conccl_last_error(); }

struct Dev {
  conccl_device_t d = capitest::open_emu();
  ~Dev() { conccl_device_close(d); }
};

// The names of the enumerations come from the C++ tables; a number that is
// none of them is "?" (the numbers themselves are checked at build time,
// src/c_api/enums.cpp).
TEST(CApi, EnumerationsAreNamed) {
  EXPECT_STREQ(conccl_op_name(CONCCL_ALL_GATHER), "allgather");
  EXPECT_STREQ(conccl_op_name(CONCCL_P2P), "p2p");
  EXPECT_STREQ(conccl_op_name(static_cast<conccl_op>(6)), "?");
  EXPECT_STREQ(conccl_op_name(static_cast<conccl_op>(-1)), "?");
  EXPECT_STREQ(conccl_variant_name(CONCCL_VARIANT_SINGLE), "single");
  EXPECT_STREQ(conccl_variant_name(CONCCL_VARIANT_PULL), "pull");
  EXPECT_STREQ(conccl_variant_name(static_cast<conccl_variant>(10)), "?");
  EXPECT_STREQ(conccl_datatype_name(CONCCL_BFLOAT16), "bfloat16");
  EXPECT_STREQ(conccl_datatype_name(CONCCL_FLOAT32), "float");
  EXPECT_STREQ(conccl_datatype_name(static_cast<conccl_datatype>(3)), "?");
  EXPECT_STREQ(conccl_redop_name(CONCCL_AVG), "avg");
  EXPECT_STREQ(conccl_redop_name(static_cast<conccl_redop>(5)), "?");
}

TEST(CApi, ErrorsCarryTheMessage) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.backend = "tpu";
  conccl_device_t d = reinterpret_cast<conccl_device_t>(0x1);
  EXPECT_EQ(conccl_device_open(&o, &d), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(d, nullptr) << "no handle on failure";
  EXPECT_NE(last().find("unknown backend 'tpu'"), std::string::npos) << last();
  EXPECT_STREQ(conccl_status_name(CONCCL_ERR_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(conccl_status_name(static_cast<conccl_status>(99)), "unknown");

  // A struct from an older or unset caller is refused, naming the fix.
  conccl_device_options zero{};
  EXPECT_EQ(conccl_device_open(&zero, &d), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("conccl_device_options_init"), std::string::npos) << last();
  EXPECT_EQ(conccl_device_open(&o, nullptr), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("NULL"), std::string::npos);

  // Success clears the message.
  Dev dev;
  int n = 0;
  EXPECT_EQ(conccl_device_gpu_count(dev.d, &n), CONCCL_OK);
  EXPECT_EQ(n, 8);
  EXPECT_EQ(last(), "");
  EXPECT_STRNE(conccl_version(), "");
}

// A backend's own settings, one string: emu's shape the node, an unknown key
// is refused naming the known ones.
TEST(CApi, DeviceSettings) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  EXPECT_EQ(o.settings, nullptr);
  o.settings = "preset=small gpus=2";
  conccl_device_t d = nullptr;
  ASSERT_EQ(conccl_device_open(&o, &d), CONCCL_OK) << last();
  int n = 0;
  EXPECT_EQ(conccl_device_gpu_count(d, &n), CONCCL_OK);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK);
  o.settings = "preset=small gpu=2";
  EXPECT_EQ(conccl_device_open(&o, &d), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("backend emu has no setting 'gpu' (its settings: preset, gpus"), std::string::npos) << last();
  o.backend = "nv";
  o.settings = "interrupt_waits=maybe";
  EXPECT_EQ(conccl_device_open(&o, &d), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("interrupt_waits='maybe': give 0 or 1"), std::string::npos) << last();
  // A caller built before the field existed: its struct ends at process_slot, so the field is not read;
  // it gives the emulator's shape by the fields that came first (deprecated since #30, still honoured).
  conccl_device_options old;
  conccl_device_options_init(&old);
  old.struct_size = offsetof(conccl_device_options, settings);
  old.settings = "not read=";
  old.preset = "small";
  old.gpus = 3;
  ASSERT_EQ(conccl_device_open(&old, &d), CONCCL_OK) << last();
  EXPECT_EQ(conccl_device_gpu_count(d, &n), CONCCL_OK);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK);
  // A deprecated field beside its setting: the same value is one request, another is refused.
  conccl_device_options both;
  conccl_device_options_init(&both);
  both.settings = "preset=small gpus=2";
  both.gpus = 2;
  ASSERT_EQ(conccl_device_open(&both, &d), CONCCL_OK) << last();
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK);
  both.gpus = 4;
  EXPECT_EQ(conccl_device_open(&both, &d), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("gpus is given twice"), std::string::npos) << last();
}

TEST(CApi, DeviceBuffersQueuesSignals) {
  Dev dev;
  int ids[4], count = 0;
  ASSERT_EQ(conccl_device_engines(dev.d, 0, ids, 4, &count), CONCCL_OK);
  EXPECT_EQ(count, 16) << "count is the total even past the capacity";
  EXPECT_EQ(conccl_device_engines(dev.d, 8, ids, 4, &count), CONCCL_ERR_NOT_FOUND);
  size_t need = 0;
  ASSERT_EQ(conccl_device_topology_json(dev.d, nullptr, 0, &need), CONCCL_OK);
  std::vector<char> json(need);
  ASSERT_EQ(conccl_device_topology_json(dev.d, json.data(), json.size(), &need), CONCCL_OK);
  EXPECT_NE(std::string(json.data()).find("\"backend\""), std::string::npos);
  char small[8];
  EXPECT_EQ(conccl_device_topology_json(dev.d, small, sizeof small, &need), CONCCL_ERR_OUT_OF_RANGE);
  EXPECT_EQ(std::strlen(small), 7u) << "truncated and terminated";

  const size_t n = 256 * 1024 + 12;
  conccl_buffer a{}, b{};
  ASSERT_EQ(conccl_buffer_alloc(dev.d, 0, n, CONCCL_MEM_DEVICE, &a), CONCCL_OK) << last();
  ASSERT_EQ(conccl_buffer_alloc(dev.d, 3, n, CONCCL_MEM_DEVICE, &b), CONCCL_OK) << last();
  EXPECT_EQ(conccl_buffer_alloc(dev.d, 0, n, static_cast<conccl_mem_kind>(7), &b), CONCCL_ERR_INVALID_ARGUMENT);
  std::vector<uint8_t> data(n), back(n);
  std::mt19937 rng(5);
  for (auto& x : data) x = static_cast<uint8_t>(rng());
  ASSERT_EQ(conccl_buffer_upload(dev.d, &a, 0, data.data(), n, 5000), CONCCL_OK) << last();
  EXPECT_EQ(conccl_buffer_upload(dev.d, &a, 1, data.data(), n, 5000), CONCCL_ERR_OUT_OF_RANGE) << "past the end";

  conccl_queue_t q = nullptr;
  conccl_queue_options qo;
  conccl_queue_options_init(&qo);
  qo.ring_bytes = 64 * 1024;
  ASSERT_EQ(conccl_queue_create(dev.d, 0, ids[0], &qo, &q), CONCCL_OK) << last();
  conccl_signal_t s = nullptr;
  ASSERT_EQ(conccl_signal_create(dev.d, 5, &s), CONCCL_OK);
  EXPECT_EQ(conccl_signal_value(s), 5u);
  EXPECT_NE(conccl_signal_address(s), 0u);
  ASSERT_EQ(conccl_queue_copy(q, b.va, a.va, n), CONCCL_OK);
  ASSERT_EQ(conccl_queue_signal_add(q, s, 2), CONCCL_OK);
  EXPECT_GT(conccl_queue_pending_bytes(q), 0u);
  uint64_t ticket = 0;
  ASSERT_EQ(conccl_queue_submit(q, 1000, &ticket), CONCCL_OK) << last();
  EXPECT_EQ(conccl_queue_pending_bytes(q), 0u);
  ASSERT_EQ(conccl_signal_wait(s, 7, 5000), CONCCL_OK) << last();
  ASSERT_EQ(conccl_queue_wait(q, ticket, 5000), CONCCL_OK);
  EXPECT_GE(conccl_queue_completed(q), ticket);
  ASSERT_EQ(conccl_buffer_download(dev.d, back.data(), &b, 0, n, 5000), CONCCL_OK);
  EXPECT_EQ(back, data);

  // The engine waits on a signal the host then advances.
  ASSERT_EQ(conccl_queue_wait_ge(q, s, 8), CONCCL_OK);
  ASSERT_EQ(conccl_queue_fill(q, b.va, 0xA5A5A5A5u, 4096), CONCCL_OK);
  ASSERT_EQ(conccl_queue_submit(q, 1000, &ticket), CONCCL_OK);
  EXPECT_EQ(conccl_queue_wait(q, ticket, 20), CONCCL_ERR_TIMEOUT) << "held by the signal";
  // Once the engine has reached the poll (on a loaded machine it may not
  // have within the first 20 ms), the timeout names what it waits on.
  bool named = false;
  for (int i = 0; i < 100 && !named; ++i) {
    ASSERT_EQ(conccl_queue_wait(q, ticket, 20), CONCCL_ERR_TIMEOUT) << "held by the signal";
    named = last().find("POLL_REGMEM") != std::string::npos;
  }
  EXPECT_TRUE(named) << "names what the engine waits on: " << last();
  conccl_signal_add(s, 1);
  ASSERT_EQ(conccl_queue_wait(q, ticket, 5000), CONCCL_OK) << last();
  ASSERT_EQ(conccl_buffer_download(dev.d, back.data(), &b, 0, 8, 5000), CONCCL_OK);
  EXPECT_EQ(back[0], 0xA5);

  EXPECT_EQ(conccl_queue_copy(q, b.va, a.va, 0), CONCCL_ERR_INVALID_ARGUMENT) << "0-byte copy";
  conccl_queue_t bad = q;
  EXPECT_EQ(conccl_queue_create(dev.d, 0, 999, nullptr, &bad), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, nullptr) << "a failed create leaves no handle";
  conccl_signal_destroy(s);
  conccl_queue_destroy(q);
  conccl_queue_destroy(nullptr);
  EXPECT_EQ(conccl_buffer_free(dev.d, &a), CONCCL_OK);
  EXPECT_EQ(conccl_buffer_free(dev.d, &a), CONCCL_ERR_NOT_FOUND);
  EXPECT_EQ(conccl_buffer_free(dev.d, &b), CONCCL_OK);
}

TEST(CApi, CommunicatorPlansAndNcclShapedCalls) {
  Dev dev;
  const int gpus[4] = {0, 1, 2, 3};
  conccl_comm_t comm = nullptr;
  conccl_comm_options co;
  conccl_comm_options_init(&co);
  co.timeout_ms = 5000;
  ASSERT_EQ(conccl_comm_create(dev.d, gpus, 4, &co, &comm), CONCCL_OK) << last();
  EXPECT_EQ(conccl_comm_size(comm), 4);
  const int dup[2] = {0, 0};
  conccl_comm_t bad = nullptr;
  EXPECT_EQ(conccl_comm_create(dev.d, dup, 2, nullptr, &bad), CONCCL_ERR_INVALID_ARGUMENT) << "GPU twice without loopback";

  const size_t chunk = 12288 + 4;
  std::vector<conccl_buffer> send(4), recv(4);
  std::vector<std::vector<uint8_t>> data(4, std::vector<uint8_t>(chunk));
  std::mt19937 rng(9);
  for (int r = 0; r < 4; ++r) {
    for (auto& x : data[r]) x = static_cast<uint8_t>(rng());
    ASSERT_EQ(conccl_buffer_alloc(dev.d, r, chunk, CONCCL_MEM_DEVICE, &send[r]), CONCCL_OK);
    ASSERT_EQ(conccl_buffer_alloc(dev.d, r, chunk * 4, CONCCL_MEM_DEVICE, &recv[r]), CONCCL_OK);
    ASSERT_EQ(conccl_buffer_upload(dev.d, &send[r], 0, data[r].data(), chunk, 5000), CONCCL_OK);
  }
  for (int round = 0; round < 2; ++round) {  // the second call reuses the cached plan
    ASSERT_EQ(conccl_all_gather(send.data(), recv.data(), chunk, comm, nullptr), CONCCL_OK) << last();
    ASSERT_NO_FATAL_FAILURE(capitest::expect_gathered(dev.d, recv, data, chunk));
  }
  int stream = 0;
  EXPECT_EQ(conccl_all_gather(send.data(), recv.data(), chunk, comm, &stream), CONCCL_ERR_UNAVAILABLE);
  EXPECT_NE(last().find("needs the nv backend"), std::string::npos) << last();
  EXPECT_EQ(conccl_broadcast(send.data(), recv.data(), chunk, 4, comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT);
  {
    // gather into rank 2's recv alone (given alone): rank s's send at s x
    // chunk; scatter from rank 3's `src` of fresh random bytes: rank r's recv
    // gets chunk r of it.
    std::vector<uint8_t> stale(chunk * 4, 0x5A), fresh(chunk * 4), got(chunk * 4);
    for (auto& x : fresh) x = static_cast<uint8_t>(rng());
    ASSERT_EQ(conccl_buffer_upload(dev.d, &recv[2], 0, stale.data(), stale.size(), 5000), CONCCL_OK);
    ASSERT_EQ(conccl_gather(send.data(), &recv[2], chunk, 2, comm, nullptr), CONCCL_OK) << last();
    ASSERT_EQ(conccl_buffer_download(dev.d, got.data(), &recv[2], 0, got.size(), 5000), CONCCL_OK);
    for (int s = 0; s < 4; ++s) EXPECT_EQ(std::memcmp(got.data() + s * chunk, data[s].data(), chunk), 0) << "gather block " << s;
    EXPECT_EQ(conccl_gather(send.data(), &recv[2], chunk, 4, comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(last().find("root 4 is not a rank"), std::string::npos) << last();
    conccl_buffer src;
    ASSERT_EQ(conccl_buffer_alloc(dev.d, 3, chunk * 4, CONCCL_MEM_DEVICE, &src), CONCCL_OK);
    ASSERT_EQ(conccl_buffer_upload(dev.d, &src, 0, fresh.data(), fresh.size(), 5000), CONCCL_OK);
    ASSERT_EQ(conccl_scatter(&src, recv.data(), chunk, 3, comm, nullptr), CONCCL_OK) << last();
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(conccl_buffer_download(dev.d, got.data(), &recv[r], 0, chunk, 5000), CONCCL_OK);
      EXPECT_EQ(std::memcmp(got.data(), fresh.data() + r * chunk, chunk), 0) << "scatter into rank " << r;
    }
    EXPECT_EQ(conccl_buffer_free(dev.d, &src), CONCCL_OK);
  }

  conccl_collective_args a = capitest::all_gather_args(send.data(), recv.data(), 4, chunk);
  a.variant = CONCCL_VARIANT_B2B;
  a.prelaunch = 1;
  conccl_plan_t plan = nullptr;
  ASSERT_EQ(conccl_plan_create(comm, &a, &plan), CONCCL_OK) << last();
  EXPECT_EQ(conccl_plan_variant(plan), CONCCL_VARIANT_B2B);
  EXPECT_STREQ(conccl_variant_name(CONCCL_VARIANT_B2B), "b2b");
  ASSERT_EQ(conccl_plan_prelaunch(plan, 5000), CONCCL_OK) << last();
  uint64_t addr = 0, value = 0;
  ASSERT_EQ(conccl_plan_completion(plan, 2, &addr, &value), CONCCL_OK);
  EXPECT_EQ(value, 4u);
  EXPECT_EQ(conccl_plan_wait(plan, 20), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("release()"), std::string::npos) << last();
  ASSERT_EQ(conccl_plan_release(plan), CONCCL_OK);
  ASSERT_EQ(conccl_plan_wait(plan, 5000), CONCCL_OK) << last();
  EXPECT_NE(addr, 0u);
  EXPECT_EQ(conccl_plan_completion(plan, 4, &addr, &value), CONCCL_ERR_OUT_OF_RANGE);
  size_t need = 0;
  ASSERT_EQ(conccl_plan_describe(plan, nullptr, 0, &need), CONCCL_OK);
  EXPECT_GT(need, 10u);
  conccl_plan_destroy(plan);

  a.variant = static_cast<conccl_variant>(42);
  EXPECT_EQ(conccl_plan_create(comm, &a, &plan), CONCCL_ERR_INVALID_ARGUMENT);
  a.variant = CONCCL_VARIANT_AUTO;
  a.struct_size = 8;
  EXPECT_EQ(conccl_plan_create(comm, &a, &plan), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("conccl_collective_args_init"), std::string::npos);

  conccl_comm_destroy(comm);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(conccl_buffer_free(dev.d, &send[r]), CONCCL_OK);
    EXPECT_EQ(conccl_buffer_free(dev.d, &recv[r]), CONCCL_OK);
  }
}

// The NCCL-shaped calls keep the plans of the 64 most recently used argument
// sets: 70 calls with ever new receive buffers (as a caching allocator may
// hand out) leave 64 plans, every call's bytes verified; the oldest buffers
// then plan again and still land right, and a recently used set is reused.
TEST(CApi, NcclShapedCacheKeepsTheMostRecentlyUsed) {
  Dev dev;
  const int gpus[2] = {0, 1};
  conccl_comm_t comm = nullptr;
  ASSERT_EQ(conccl_comm_create(dev.d, gpus, 2, nullptr, &comm), CONCCL_OK) << last();
  EXPECT_EQ(conccl_comm_cached_plans(comm), 0u);
  EXPECT_EQ(conccl_comm_cached_plans(nullptr), 0u);
  const size_t chunk = 4096 + 12;
  std::vector<conccl_buffer> send(2);
  std::vector<std::vector<conccl_buffer>> recv(70, std::vector<conccl_buffer>(2));
  std::mt19937 rng(31);
  std::vector<std::vector<uint8_t>> data(2, std::vector<uint8_t>(chunk));
  for (int r = 0; r < 2; ++r) ASSERT_EQ(conccl_buffer_alloc(dev.d, r, chunk, CONCCL_MEM_DEVICE, &send[r]), CONCCL_OK);
  auto call = [&](int k) {
    for (int r = 0; r < 2; ++r) {
      for (auto& x : data[r]) x = static_cast<uint8_t>(rng() | 0x80);
      ASSERT_EQ(conccl_buffer_upload(dev.d, &send[r], 0, data[r].data(), chunk, 5000), CONCCL_OK);
    }
    ASSERT_EQ(conccl_all_gather(send.data(), recv[k].data(), chunk, comm, nullptr), CONCCL_OK) << last();
    for (int r = 0; r < 2; ++r) {
      std::vector<uint8_t> got(chunk * 2);
      ASSERT_EQ(conccl_buffer_download(dev.d, got.data(), &recv[k][r], 0, got.size(), 5000), CONCCL_OK);
      for (int s = 0; s < 2; ++s)
        ASSERT_EQ(std::memcmp(got.data() + chunk * s, data[s].data(), chunk), 0) << "call " << k << " rank " << r;
    }
  };
  for (int k = 0; k < 70; ++k) {
    for (int r = 0; r < 2; ++r)
      ASSERT_EQ(conccl_buffer_alloc(dev.d, r, chunk * 2, CONCCL_MEM_DEVICE, &recv[k][r]), CONCCL_OK);
    call(k);
    EXPECT_EQ(conccl_comm_cached_plans(comm), std::min<size_t>(k + 1, 64)) << "after call " << k;
  }
  call(69);  // cached: no new plan
  EXPECT_EQ(conccl_comm_cached_plans(comm), 64u);
  call(0);  // given up long ago: planned again, in place of the oldest
  EXPECT_EQ(conccl_comm_cached_plans(comm), 64u);
  conccl_comm_destroy(comm);
  for (auto& pair : recv)
    for (auto& b : pair) EXPECT_EQ(conccl_buffer_free(dev.d, &b), CONCCL_OK);
  for (auto& b : send) EXPECT_EQ(conccl_buffer_free(dev.d, &b), CONCCL_OK);
}

// Another writer releases a prelaunched plan with the stores the plan names:
// here a DMA queue of the device makes them (as a compute stream would with
// cu/hipStreamWriteValue64), and the data lands verified. CUDA calls on a
// backend without CUDA are refused with the reason.
TEST(CApi, ReleaseByStoresAndCudaCallsElsewhere) {
  Dev dev;
  const int gpus[2] = {0, 1};
  conccl_comm_t comm = nullptr;
  conccl_comm_options co;
  conccl_comm_options_init(&co);
  co.timeout_ms = 5000;
  ASSERT_EQ(conccl_comm_create(dev.d, gpus, 2, &co, &comm), CONCCL_OK) << last();
  const size_t chunk = 8192 + 12;
  std::vector<conccl_buffer> send(2), recv(2);
  std::vector<std::vector<uint8_t>> data(2, std::vector<uint8_t>(chunk));
  std::mt19937 rng(21);
  for (int r = 0; r < 2; ++r) {
    for (auto& x : data[r]) x = static_cast<uint8_t>(rng());
    ASSERT_EQ(conccl_buffer_alloc(dev.d, r, chunk, CONCCL_MEM_DEVICE, &send[r]), CONCCL_OK);
    ASSERT_EQ(conccl_buffer_alloc(dev.d, r, chunk * 2, CONCCL_MEM_DEVICE, &recv[r]), CONCCL_OK);
    ASSERT_EQ(conccl_buffer_upload(dev.d, &send[r], 0, data[r].data(), chunk, 5000), CONCCL_OK);
  }
  auto verify = [&] {
    for (int r = 0; r < 2; ++r) {
      std::vector<uint8_t> got(chunk * 2);
      ASSERT_EQ(conccl_buffer_download(dev.d, got.data(), &recv[r], 0, got.size(), 5000), CONCCL_OK);
      for (int s = 0; s < 2; ++s)
        EXPECT_EQ(std::memcmp(got.data() + chunk * s, data[s].data(), chunk), 0) << "rank " << r << " block " << s;
    }
  };
  conccl_collective_args a;
  conccl_collective_args_init(&a);
  a.op = CONCCL_ALL_GATHER;
  a.variant = CONCCL_VARIANT_PCPY;
  a.bytes = chunk;
  a.send = send.data();
  a.nsend = 2;
  a.recv = recv.data();
  a.nrecv = 2;
  a.prelaunch = 1;
  conccl_plan_t plan = nullptr;
  ASSERT_EQ(conccl_plan_create(comm, &a, &plan), CONCCL_OK) << last();
  conccl_store st[4];
  int count = 0;
  EXPECT_EQ(conccl_plan_release_by_stores(plan, st, 4, &count), CONCCL_ERR_INVALID_ARGUMENT) << "not prelaunched";
  conccl_store none;
  EXPECT_EQ(conccl_plan_consumed_store(plan, &none), CONCCL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(conccl_plan_prelaunch(plan, 5000), CONCCL_OK) << last();
  EXPECT_EQ(conccl_plan_release_by_stores(plan, st, 1, &count), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("too small"), std::string::npos) << last();
  EXPECT_EQ(conccl_plan_wait(plan, 20), CONCCL_ERR_INVALID_ARGUMENT) << "still waiting for a release";
  ASSERT_EQ(conccl_plan_release_by_stores(plan, st, 4, &count), CONCCL_OK) << last();
  // SDMA signals: the twin (+8, value + 2^31) first, then the value.
  ASSERT_EQ(count, 2);
  EXPECT_EQ(st[0].address, st[1].address + 8);
  EXPECT_EQ(st[0].value, 1u + (1u << 31));
  EXPECT_EQ(st[1].value, 1u);
  EXPECT_EQ(conccl_plan_wait(plan, 50), CONCCL_ERR_TIMEOUT) << "nothing stored yet";
  int engines[16], n_eng = 0;
  ASSERT_EQ(conccl_device_engines(dev.d, 0, engines, 16, &n_eng), CONCCL_OK);
  conccl_queue_t q = nullptr;
  ASSERT_EQ(conccl_queue_create(dev.d, 0, engines[0], nullptr, &q), CONCCL_OK) << last();
  conccl_store done;
  ASSERT_EQ(conccl_plan_consumed_store(plan, &done), CONCCL_OK) << last();
  st[count++] = done;  // the writer's last store: it is past its waits
  for (int i = 0; i < count; ++i) {  // each 64-bit store as two dword fills, low dword first
    ASSERT_EQ(conccl_queue_fill(q, st[i].address, static_cast<uint32_t>(st[i].value), 4), CONCCL_OK) << last();
    ASSERT_EQ(conccl_queue_fill(q, st[i].address + 4, static_cast<uint32_t>(st[i].value >> 32), 4), CONCCL_OK);
  }
  ASSERT_EQ(conccl_queue_submit(q, 5000, nullptr), CONCCL_OK) << last();
  ASSERT_EQ(conccl_plan_wait(plan, 5000), CONCCL_OK) << last();
  verify();
  conccl_queue_destroy(q);
  // Handed off and never stored: destroying the plan releases it, and the
  // queues it blocked run the next call.
  ASSERT_EQ(conccl_plan_prelaunch(plan, 5000), CONCCL_OK) << last();
  ASSERT_EQ(conccl_plan_release_by_stores(plan, st, 4, &count), CONCCL_OK) << last();
  conccl_plan_destroy(plan);
  ASSERT_EQ(conccl_all_gather(send.data(), recv.data(), chunk, comm, nullptr), CONCCL_OK) << last();
  verify();

  // CUDA memory and streams need the nv backend.
  int stream = 0, ordinal = -1;
  conccl_buffer b;
  EXPECT_EQ(conccl_all_gather(send.data(), recv.data(), chunk, comm, &stream), CONCCL_ERR_UNAVAILABLE);
  EXPECT_EQ(conccl_buffer_alloc_cuda(dev.d, 0, 4096, &b), CONCCL_ERR_UNAVAILABLE);
  EXPECT_NE(last().find("nv backend"), std::string::npos) << last();
  EXPECT_EQ(conccl_buffer_alloc(dev.d, 0, 4096, CONCCL_MEM_CUDA, &b), CONCCL_ERR_UNAVAILABLE) << "the same call by kind";
  EXPECT_NE(last().find("nv backend"), std::string::npos) << last();
  EXPECT_EQ(conccl_buffer_alloc(dev.d, 0, 4096, static_cast<conccl_mem_kind>(7), &b), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last().find("CONCCL_MEM_CUDA"), std::string::npos) << last();
  EXPECT_EQ(conccl_buffer_register_cuda(dev.d, 0, 0x7f0000000000ull, 4096, &b), CONCCL_ERR_UNAVAILABLE);
  EXPECT_EQ(conccl_device_cuda_ordinal(dev.d, 0, &ordinal), CONCCL_ERR_UNAVAILABLE);
  uint64_t cuda_ptr = 0;
  EXPECT_EQ(conccl_buffer_cuda_pointer(dev.d, &send[0], &cuda_ptr), CONCCL_ERR_NOT_FOUND);
  EXPECT_NE(std::string(conccl_last_error()).find("conccl_buffer_alloc_cuda"), std::string::npos) << last();
  EXPECT_EQ(conccl_buffer_cuda_pointer(dev.d, &send[0], nullptr), CONCCL_ERR_INVALID_ARGUMENT);
  a.prelaunch = 1;
  ASSERT_EQ(conccl_plan_create(comm, &a, &plan), CONCCL_OK) << last();
  EXPECT_EQ(conccl_plan_enqueue_on_stream(plan, &stream, 1000), CONCCL_ERR_UNAVAILABLE);
  conccl_plan_destroy(plan);
  conccl_comm_destroy(comm);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(conccl_buffer_free(dev.d, &send[r]), CONCCL_OK);
    EXPECT_EQ(conccl_buffer_free(dev.d, &recv[r]), CONCCL_OK);
  }
}

// Ranks in forked processes (c_api_ranks.hpp): their communicators' calls'
// deadline.
constexpr uint32_t kRankTimeoutMs = 20000;

}  // namespace

// One process per rank through the C API: the id as a string, a device per
// process at its own slot, this rank's buffers alone, every byte checked.
TEST(CApi, OneProcessPerRank) {
  conccl_unique_id id;
  ASSERT_EQ(conccl_get_unique_id(&id), CONCCL_OK);
  char text[64];
  ASSERT_EQ(conccl_unique_id_to_string(&id, text, sizeof text), CONCCL_OK);
  char tiny[8];
  EXPECT_EQ(conccl_unique_id_to_string(&id, tiny, sizeof tiny), CONCCL_ERR_INVALID_ARGUMENT);
  conccl_unique_id bad;
  EXPECT_EQ(conccl_unique_id_from_string("conccl-uid-xyz", &bad), CONCCL_ERR_INVALID_ARGUMENT);
  constexpr int n = 3;
  constexpr size_t chunk = 40000;
  auto data = [](int r) {
    std::vector<uint8_t> v(chunk);
    std::mt19937 rng(100 + r);
    for (auto& x : v) x = static_cast<uint8_t>(rng());
    return v;
  };
  std::vector<conccl::mptest::RankOutcome> res = conccl::mptest::fork_ranks({0, 1, 2}, [&](int r, std::string* out) {
    conccl_unique_id mine;
    if (conccl_unique_id_from_string(text, &mine) != CONCCL_OK) return *out = last(), 2;
    conccl_device_t d = nullptr;
    conccl_comm_t comm = nullptr;
    if (int rc = capitest::open_rank(r, n, mine, &d, &comm, out, kRankTimeoutMs)) return rc;
    if (conccl_comm_rank(comm) != r || conccl_comm_size(comm) != n) return *out = "rank/size", 5;
    conccl_buffer send, recv;
    if (conccl_buffer_alloc(d, r, chunk, CONCCL_MEM_DEVICE, &send) != CONCCL_OK ||
        conccl_buffer_alloc(d, r, chunk * n, CONCCL_MEM_DEVICE, &recv) != CONCCL_OK)
      return *out = last(), 6;
    const std::vector<uint8_t> mine_data = data(r);
    if (conccl_buffer_upload(d, &send, 0, mine_data.data(), chunk, 5000) != CONCCL_OK) return *out = last(), 7;
    conccl_collective_args a = capitest::all_gather_args(&send, &recv, 1, chunk);
    conccl_plan_t plan = nullptr;
    if (conccl_plan_create(comm, &a, &plan) != CONCCL_OK) return *out = last(), 9;
    for (int k = 0; k < 2; ++k)
      if (conccl_plan_launch(plan, 20000) != CONCCL_OK || conccl_plan_wait(plan, 20000) != CONCCL_OK)
        return *out = last(), 10;
    std::vector<uint8_t> got(chunk * n);
    if (conccl_buffer_download(d, got.data(), &recv, 0, got.size(), 5000) != CONCCL_OK) return *out = last(), 11;
    for (int s = 0; s < n; ++s)
      if (std::memcmp(got.data() + s * chunk, data(s).data(), chunk) != 0) return *out = "chunk " + std::to_string(s), 12;
    conccl_plan_destroy(plan);
    conccl_comm_destroy(comm);
    conccl_device_close(d);
    return 0;
  });
  conccl::mptest::expect_ranks_ok(res);
}

// The NCCL-shaped calls with one process per rank: this rank's buffers
// alone, as ncclAllGather takes them. Repeated calls reuse the plan; when one
// rank's buffer changes, every rank plans again (its bytes land in the new
// buffer); broadcast reads the root's send only; every byte is checked.
TEST(CApi, NcclShapedCallsOneProcessPerRank) {
  constexpr int n = 3;
  constexpr size_t chunk = 24576 + 8;
  auto data = [](int r, int round) { return capitest::rank_data(chunk * n, 1000, r, round); };
  capitest::run_ranks(n, kRankTimeoutMs, [&](int r, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_buffer send, recv, recv2;
    if (conccl_buffer_alloc(d, r, chunk * n, CONCCL_MEM_DEVICE, &send) != CONCCL_OK ||
        conccl_buffer_alloc(d, r, chunk * n, CONCCL_MEM_DEVICE, &recv) != CONCCL_OK ||
        conccl_buffer_alloc(d, r, chunk * n, CONCCL_MEM_DEVICE, &recv2) != CONCCL_OK)
      return *out = last(), 5;
    std::vector<uint8_t> got(chunk * n);
    // One all-gather of this round's data into `into`, every byte checked;
    // "" or what went wrong.
    auto gather_round = [&](int round, const conccl_buffer& into) -> std::string {
      const std::vector<uint8_t> mine = data(r, round);
      const std::string at = "all_gather round " + std::to_string(round);
      if (conccl_buffer_upload(d, &send, 0, mine.data(), mine.size(), 5000) != CONCCL_OK ||
          conccl_all_gather(&send, &into, chunk, comm, nullptr) != CONCCL_OK ||
          conccl_buffer_download(d, got.data(), &into, 0, got.size(), 5000) != CONCCL_OK)
        return at + ": " + last();
      for (int s = 0; s < n; ++s)
        if (std::memcmp(got.data() + s * chunk, data(s, round).data(), chunk) != 0)
          return at + " chunk " + std::to_string(s);
      return "";
    };
    // Round 2: rank 1 receives into another buffer; the others keep theirs.
    for (int round = 0; round < 4; ++round)
      if (std::string e = gather_round(round, round == 2 && r == 1 ? recv2 : recv); !e.empty()) return *out = e, 7;
    // The same call again and again, new data each time: every rank ends
    // each launch at the next call's vote (no barrier of its own), and the
    // one plan is launched again.
    for (int round = 10; round < 22; ++round)
      if (std::string e = gather_round(round, recv); !e.empty()) return *out = e, 20;
    const size_t cached = conccl_comm_cached_plans(comm);
    // One for the repeated call; rank 1 also keeps round 2's, for recv2.
    const size_t want = r == 1 ? 2 : 1;
    if (cached != want)
      return *out = "cached plans: " + std::to_string(cached) + ", want " + std::to_string(want), 24;
    // all_to_all: chunk d of rank s's send lands at recv[d] + s * chunk.
    const std::vector<uint8_t> a2a = data(r, 7);
    if (conccl_buffer_upload(d, &send, 0, a2a.data(), a2a.size(), 5000) != CONCCL_OK) return *out = last(), 10;
    if (conccl_all_to_all(&send, &recv, chunk, comm, nullptr) != CONCCL_OK) return *out = last(), 11;
    if (conccl_buffer_download(d, got.data(), &recv, 0, got.size(), 5000) != CONCCL_OK) return *out = last(), 12;
    for (int s = 0; s < n; ++s)
      if (std::memcmp(got.data() + s * chunk, data(s, 7).data() + r * chunk, chunk) != 0)
        return *out = "all_to_all chunk " + std::to_string(s), 13;
    // broadcast from rank 2: the others pass no send buffer.
    if (conccl_broadcast(r == 2 ? &send : nullptr, &recv2, chunk, 2, comm, nullptr) != CONCCL_OK)
      return *out = last(), 14;
    if (conccl_buffer_download(d, got.data(), &recv2, 0, chunk, 5000) != CONCCL_OK) return *out = last(), 15;
    if (std::memcmp(got.data(), data(2, 7).data(), chunk) != 0) return *out = "broadcast", 16;
    // gather to rank 1 (the others pass no recv): rank s's send at s x chunk
    // of the root's recv2; the others' recv2 untouched.
    const std::vector<uint8_t> g = data(r, 8);
    if (conccl_buffer_upload(d, &send, 0, g.data(), chunk, 5000) != CONCCL_OK) return *out = last(), 30;
    std::vector<uint8_t> before(chunk * n);
    if (conccl_buffer_download(d, before.data(), &recv2, 0, before.size(), 5000) != CONCCL_OK) return *out = last(), 30;
    if (conccl_gather(&send, r == 1 ? &recv2 : nullptr, chunk, 1, comm, nullptr) != CONCCL_OK) return *out = last(), 31;
    if (conccl_buffer_download(d, got.data(), &recv2, 0, got.size(), 5000) != CONCCL_OK) return *out = last(), 32;
    for (int s = 0; s < n; ++s)
      if (std::memcmp(got.data() + s * chunk, r == 1 ? data(s, 8).data() : before.data() + s * chunk, chunk) != 0)
        return *out = "gather chunk " + std::to_string(s), 33;
    // scatter from rank 0 (the others pass no send): rank r gets the root's
    // chunk r.
    const std::vector<uint8_t> sc = data(0, 9);
    if (r == 0 && conccl_buffer_upload(d, &send, 0, sc.data(), chunk * n, 5000) != CONCCL_OK) return *out = last(), 34;
    if (conccl_scatter(r == 0 ? &send : nullptr, &recv, chunk, 0, comm, nullptr) != CONCCL_OK) return *out = last(), 35;
    if (conccl_buffer_download(d, got.data(), &recv, 0, chunk, 5000) != CONCCL_OK) return *out = last(), 36;
    if (std::memcmp(got.data(), sc.data() + r * chunk, chunk) != 0) return *out = "scatter", 37;
    // The root must give its side; off the root, NULL is fine.
    if (r == 0) {
      if (conccl_gather(&send, nullptr, chunk, 0, comm, nullptr) != CONCCL_ERR_INVALID_ARGUMENT ||
          !std::strstr(conccl_last_error(), "on the root; other ranks may pass NULL"))
        return *out = std::string("gather without the root's recv: ") + conccl_last_error(), 38;
    }
    // Errors: no send buffer for an all-gather; a stream on the emulator.
    if (conccl_all_gather(nullptr, &recv, chunk, comm, nullptr) != CONCCL_ERR_INVALID_ARGUMENT ||
        !std::strstr(conccl_last_error(), "this rank's send buffer"))
      return *out = std::string("no send: ") + conccl_last_error(), 17;
    if (conccl_all_gather(&send, &recv, chunk, comm, reinterpret_cast<void*>(1)) != CONCCL_ERR_UNAVAILABLE)
      return *out = std::string("stream: ") + conccl_last_error(), 18;
    conccl_comm_destroy(comm);
    for (conccl_buffer* b : {&send, &recv, &recv2}) (void)conccl_buffer_free(d, b);
    conccl_device_close(d);
    return 0;
  });
}

// The NCCL-shaped calls on buffers inside windows: no bootstrap message per
// call (the stats before and after 20 all-gathers and 4 all-to-alls of random
// data), every byte checked.
TEST(CApi, NcclShapedCallsThroughWindowsSendNoMessage) {
  constexpr int n = 2;
  constexpr int kGathers = 20, kRounds = kGathers + 4;
  constexpr size_t chunk = 8192 + 24;
  auto data = [](int r, int round) { return capitest::rank_data(chunk * n, 7000, r, round); };
  capitest::run_ranks(n, kRankTimeoutMs, [&](int r, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_comm_stats created;
    if (conccl_comm_get_stats(comm, &created) != CONCCL_OK) return *out = last(), 5;
    conccl_buffer mem;
    if (conccl_buffer_alloc(d, r, 4 * chunk * n, CONCCL_MEM_DEVICE, &mem) != CONCCL_OK) return *out = last(), 5;
    conccl_window_t w = nullptr;
    if (conccl_comm_window_register(comm, &mem, &w) != CONCCL_OK || !w) return *out = last(), 6;
    // Sub-ranges of the window, at the same offsets on both ranks.
    const conccl_buffer send = capitest::sub(mem, 0, chunk * n), recv = capitest::sub(mem, 2 * chunk * n, chunk * n);
    conccl_comm_stats before, after;
    if (conccl_comm_get_stats(comm, &before) != CONCCL_OK) return *out = last(), 7;
    // The registration exchanged (twice: the windows, then every rank's verdict).
    if (before.bootstrap_messages_sent <= created.bootstrap_messages_sent ||
        before.bootstrap_messages_received <= created.bootstrap_messages_received)
      return *out = "registration counted no message", 8;
    std::vector<uint8_t> got(chunk * n);
    for (int round = 0; round < kRounds; ++round) {
      const std::vector<uint8_t> mine = data(r, round);
      if (conccl_buffer_upload(d, &send, 0, mine.data(), mine.size(), 5000) != CONCCL_OK) return *out = last(), 9;
      const bool a2a = round >= kGathers;
      const conccl_status s = a2a ? conccl_all_to_all(&send, &recv, chunk, comm, nullptr)
                                  : conccl_all_gather(&send, &recv, chunk, comm, nullptr);
      if (s != CONCCL_OK) return *out = "round " + std::to_string(round) + ": " + last(), 10;
      if (conccl_buffer_download(d, got.data(), &recv, 0, got.size(), 5000) != CONCCL_OK) return *out = last(), 11;
      for (int q = 0; q < n; ++q)
        if (std::memcmp(got.data() + q * chunk, data(q, round).data() + (a2a ? r * chunk : 0), chunk) != 0)
          return *out = "round " + std::to_string(round) + " chunk " + std::to_string(q) + " WRONG", 12;
    }
    if (conccl_comm_get_stats(comm, &after) != CONCCL_OK) return *out = last(), 13;
    if (after.bootstrap_messages_sent != before.bootstrap_messages_sent ||
        after.bootstrap_messages_received != before.bootstrap_messages_received ||
        after.window_calls - before.window_calls != kRounds || after.calls - before.calls != kRounds ||
        after.window_plans - before.window_plans != 2)
      return *out = "messages sent " + std::to_string(after.bootstrap_messages_sent - before.bootstrap_messages_sent) +
                    " received " + std::to_string(after.bootstrap_messages_received - before.bootstrap_messages_received) +
                    ", calls " + std::to_string(after.calls - before.calls) + ", window calls " +
                    std::to_string(after.window_calls - before.window_calls) + ", window plans " +
                    std::to_string(after.window_plans - before.window_plans), 14;
    conccl_status async = CONCCL_ERR_INTERNAL;
    if (conccl_comm_get_async_error(comm, &async) != CONCCL_OK || async != CONCCL_OK) return *out = last(), 15;
    if (conccl_comm_window_deregister(comm, w) != CONCCL_OK) return *out = last(), 16;
    conccl_comm_destroy(comm);
    (void)conccl_buffer_free(d, &mem);
    conccl_device_close(d);
    return 0;
  });
}

// Window handles misused, on 2 ranks: every refusal names the C function, the
// communicator stays usable, and a destroyed communicator takes its windows.
TEST(CApi, WindowHandlesMisuse) {
  conccl_unique_id id2;
  ASSERT_EQ(conccl_get_unique_id(&id2), CONCCL_OK);
  constexpr int n = 2;
  constexpr size_t chunk = 4096;
  capitest::run_ranks(n, kRankTimeoutMs, [&](int r, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_comm_t comm2 = nullptr;
    auto refused = [&](conccl_status got, conccl_status want, const char* fn, const char* says, const char* what) {
      const std::string msg = last();
      if (got == want && msg.rfind(fn, 0) == 0 && msg.find(says) != std::string::npos) return false;
      *out = std::string(what) + ": status " + std::to_string(got) + ", '" + msg + "'";
      return true;
    };
    conccl_buffer mem;
    if (conccl_buffer_alloc(d, r, 2 * chunk * n, CONCCL_MEM_DEVICE, &mem) != CONCCL_OK) return *out = last(), 5;
    // NULL arguments.
    conccl_window_t w = reinterpret_cast<conccl_window_t>(uintptr_t(1));
    if (refused(conccl_comm_window_register(comm, nullptr, &w), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_window_register", "NULL", "NULL buffer"))
      return 6;
    if (refused(conccl_comm_window_register(comm, &mem, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_window_register", "NULL", "NULL window"))
      return 7;
    // A buffer of another device (of this process): refused before any
    // exchange, on every rank alike; *window stays NULL.
    conccl_device_t other = nullptr;
    {
      conccl_device_options o;
      conccl_device_options_init(&o);
      if (conccl_device_open(&o, &other) != CONCCL_OK) return *out = last(), 8;
    }
    conccl_buffer foreign;
    if (conccl_buffer_alloc(other, 0, chunk, CONCCL_MEM_DEVICE, &foreign) != CONCCL_OK) return *out = last(), 9;
    if (refused(conccl_comm_window_register(comm, &foreign, &w), CONCCL_ERR_NOT_FOUND, "conccl_comm_window_register",
                "another device", "a buffer of another device"))
      return 10;
    if (w) return *out = "window not NULL after a refusal", 11;
    // A struct that does not match its allocation.
    conccl_buffer longer = mem;
    longer.size += 1;
    if (refused(conccl_comm_window_register(comm, &longer, &w), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_window_register", "size", "a buffer longer than its allocation"))
      return 12;
    // The communicator is still usable: a window, one call through it.
    if (conccl_comm_window_register(comm, &mem, &w) != CONCCL_OK || !w) return *out = last(), 13;
    const conccl_buffer send = capitest::sub(mem, 0, chunk), recv = capitest::sub(mem, chunk * n, chunk * n);
    if (conccl_all_gather(&send, &recv, chunk, comm, nullptr) != CONCCL_OK) return *out = last(), 14;
    // A stream on the emulated backend: no CUDA stream to order it on. Every
    // rank is refused before the call, so the next call still pairs up.
    conccl_comm_stats s0, s1;
    if (conccl_comm_get_stats(comm, &s0) != CONCCL_OK) return *out = last(), 15;
    if (refused(conccl_all_gather(&send, &recv, chunk, comm, reinterpret_cast<void*>(uintptr_t(1))),
                CONCCL_ERR_UNAVAILABLE, "conccl_all_gather", "nv", "a stream on emu"))
      return 16;
    if (conccl_all_gather(&send, &recv, chunk, comm, nullptr) != CONCCL_OK) return *out = last(), 17;
    if (conccl_comm_get_stats(comm, &s1) != CONCCL_OK) return *out = last(), 18;
    if (s1.bootstrap_messages_sent != s0.bootstrap_messages_sent || s1.window_calls != s0.window_calls + 1)
      return *out = "the refused call counted", 19;
    // Another kind of handle, or NULL, where a window goes.
    if (refused(conccl_comm_window_deregister(comm, reinterpret_cast<conccl_window_t>(comm)),
                CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_window_deregister", "window", "a comm as a window"))
      return 20;
    if (refused(conccl_comm_window_deregister(comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_window_deregister", "window", "a NULL window"))
      return 21;
    // A window of another (live) communicator.
    if (conccl_comm_create_rank(d, r, n, &id2, r, nullptr, &comm2) != CONCCL_OK) return *out = last(), 22;
    if (refused(conccl_comm_window_deregister(comm2, w), CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_window_deregister",
                "another communicator", "a window of another communicator"))
      return 23;
    // Deregistered: the handle is stale, twice over.
    if (conccl_comm_window_deregister(comm, w) != CONCCL_OK) return *out = last(), 24;
    for (int k = 0; k < 2; ++k)
      if (refused(conccl_comm_window_deregister(comm, w), CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_window_deregister",
                  "window", "deregistering again"))
        return 25;
    // The buffers are outside every window now: the vote path, still right.
    if (conccl_all_gather(&send, &recv, chunk, comm, nullptr) != CONCCL_OK) return *out = last(), 26;
    // Destroying the communicator invalidates its windows.
    conccl_window_t w2 = nullptr;
    if (conccl_comm_window_register(comm, &mem, &w2) != CONCCL_OK || !w2) return *out = last(), 27;
    if (conccl_comm_destroy(comm) != CONCCL_OK) return *out = last(), 28;
    if (refused(conccl_comm_window_deregister(comm2, w2), CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_window_deregister",
                "window", "a window of a destroyed communicator"))
      return 29;
    conccl_comm_stats st;
    if (refused(conccl_comm_get_stats(comm, &st), CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_get_stats", "comm",
                "stats of a destroyed communicator"))
      return 30;
    conccl_status async = CONCCL_OK;
    if (refused(conccl_comm_get_async_error(comm, &async), CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_get_async_error",
                "comm", "async error of a destroyed communicator"))
      return 31;
    if (refused(conccl_comm_get_stats(comm2, nullptr), CONCCL_ERR_INVALID_ARGUMENT, "conccl_comm_get_stats", "NULL",
                "NULL stats"))
      return 32;
    // The second communicator's windows are its own (ids from 0 again).
    conccl_window_t w3 = nullptr;
    if (conccl_comm_window_register(comm2, &mem, &w3) != CONCCL_OK || !w3) return *out = last(), 33;
    if (conccl_all_gather(&send, &recv, chunk, comm2, nullptr) != CONCCL_OK) return *out = last(), 34;
    if (conccl_comm_window_deregister(comm2, w3) != CONCCL_OK) return *out = last(), 35;
    conccl_comm_destroy(comm2);
    (void)conccl_buffer_free(other, &foreign);
    conccl_device_close(other);
    (void)conccl_buffer_free(d, &mem);
    conccl_device_close(d);
    return 0;
  });
}

// conccl_comm_get_ranks_gone: none while every rank is there; a rank that
// destroys its communicator and exits is named within seconds, with nothing
// sent; the count alone with capacity 0; bad arguments refused, naming them.
TEST(CApi, RanksGoneNamesProcessesThatLeft) {
  constexpr int n = 3;
  constexpr size_t chunk = 4096;
  conccl_unique_id id;
  ASSERT_EQ(conccl_get_unique_id(&id), CONCCL_OK);
  std::vector<conccl::mptest::RankOutcome> res = conccl::mptest::fork_ranks({0, 1, 2}, [&](int r, std::string* out) {
    auto refused = [&](conccl_status got, conccl_status want, const char* fn, const char* says, const char* what) {
      const std::string msg = last();
      if (got == want && msg.rfind(fn, 0) == 0 && msg.find(says) != std::string::npos) return false;
      *out = std::string(what) + ": status " + std::to_string(got) + ", '" + msg + "'";
      return true;
    };
    conccl_device_t d = nullptr;
    conccl_comm_t comm = nullptr;
    if (int rc = capitest::open_rank(r, n, id, &d, &comm, out, kRankTimeoutMs)) return rc;
    int gone[4] = {-1, -1, -1, -1};
    int count = -1;
    // Before the all-gather below no rank can have left: every rank takes part in it.
    if (conccl_comm_get_ranks_gone(comm, gone, 4, &count) != CONCCL_OK) return *out = last(), 5;
    if (count != 0) return *out = "ranks gone before anyone left: " + std::to_string(count), 6;
    if (refused(conccl_comm_get_ranks_gone(comm, gone, 4, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_get_ranks_gone", "count", "a NULL count"))
      return 7;
    if (refused(conccl_comm_get_ranks_gone(comm, nullptr, 2, &count), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_get_ranks_gone", "capacity 2", "NULL ranks with room for 2"))
      return 8;
    if (refused(conccl_comm_get_ranks_gone(comm, gone, -1, &count), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_get_ranks_gone", "capacity", "a negative capacity"))
      return 9;
    conccl_buffer send, recv;
    if (conccl_buffer_alloc(d, r, chunk, CONCCL_MEM_DEVICE, &send) != CONCCL_OK ||
        conccl_buffer_alloc(d, r, chunk * n, CONCCL_MEM_DEVICE, &recv) != CONCCL_OK)
      return *out = last(), 10;
    if (conccl_all_gather(&send, &recv, chunk, comm, nullptr) != CONCCL_OK) return *out = last(), 11;
    if (r == 2) {  // leaves: its communicator, then its process
      conccl_comm_destroy(comm);
      conccl_device_close(d);
      return 0;
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (true) {
      if (conccl_comm_get_ranks_gone(comm, nullptr, 0, &count) != CONCCL_OK) return *out = last(), 12;
      if (count > 0 || std::chrono::steady_clock::now() > end) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (count < 1) return *out = "no rank gone 20 s after rank 2 left", 13;
    // Rank 2 for sure; the other survivor too once it has finished (it leaves right after).
    count = -1;
    if (conccl_comm_get_ranks_gone(comm, gone, 4, &count) != CONCCL_OK) return *out = last(), 14;
    const std::vector<int> got(gone, gone + std::max(0, std::min(count, 4)));
    const std::vector<int> only2{2}, both{1 - r, 2};
    if (got != only2 && got != both) {
      std::string list;
      for (int g : got) list += std::to_string(g) + " ";
      return *out = "ranks gone: " + list + "(count " + std::to_string(count) + ")", 15;
    }
    conccl_comm_destroy(comm);
    if (refused(conccl_comm_get_ranks_gone(comm, gone, 4, &count), CONCCL_ERR_INVALID_ARGUMENT,
                "conccl_comm_get_ranks_gone", "comm", "a destroyed communicator"))
      return 16;
    conccl_device_close(d);
    return 0;
  });
  conccl::mptest::expect_ranks_ok(res);
}

// One communicator of every rank in one process has no windows to register.
TEST(CApi, WindowsNeedOneProcessPerRank) {
  Dev dev;
  conccl_comm_t comm = nullptr;
  const int gpus[] = {0, 1};
  ASSERT_EQ(conccl_comm_create(dev.d, gpus, 2, nullptr, &comm), CONCCL_OK) << last();
  conccl_buffer mem;
  ASSERT_EQ(conccl_buffer_alloc(dev.d, 0, 4096, CONCCL_MEM_DEVICE, &mem), CONCCL_OK) << last();
  conccl_window_t w = nullptr;
  EXPECT_EQ(conccl_comm_window_register(comm, &mem, &w), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(last()).rfind("conccl_comm_window_register", 0), 0u) << last();
  EXPECT_NE(last().find("separate processes"), std::string::npos) << last();
  EXPECT_EQ(w, nullptr);
  conccl_comm_stats st;
  ASSERT_EQ(conccl_comm_get_stats(comm, &st), CONCCL_OK) << last();
  EXPECT_EQ(st.bootstrap_messages_sent, 0u);
  EXPECT_EQ(st.bootstrap_messages_received, 0u);
  conccl_status async = CONCCL_ERR_INTERNAL;
  ASSERT_EQ(conccl_comm_get_async_error(comm, &async), CONCCL_OK) << last();
  EXPECT_EQ(async, CONCCL_OK);
  int count = -1;
  ASSERT_EQ(conccl_comm_get_ranks_gone(comm, nullptr, 0, &count), CONCCL_OK) << last();
  EXPECT_EQ(count, 0);  // no other process
  EXPECT_EQ(conccl_buffer_free(dev.d, &mem), CONCCL_OK);
  EXPECT_EQ(conccl_comm_destroy(comm), CONCCL_OK);
}
