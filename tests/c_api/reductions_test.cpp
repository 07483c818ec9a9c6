// tests/c_api/reductions_test.cpp - conccl_reduce_scatter, conccl_all_reduce
// and conccl_reduce on the emulated node: every element type x operator of
// each call with every rank in one process, bit for bit against the host
// reduction of the same inputs in rank order (collectives/
// reduction_test_data.hpp); in place; one process per rank (2 and 3 ranks,
// forked) with this rank's buffers alone and NULL recv off the root of
// reduce; and the argument errors, each naming the C function and the fix.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduction_test_data.hpp"
#include "c_api/c_api_ranks.hpp"
#include "conccl/conccl.h"
#include "multiproc/fork_ranks.hpp"

namespace {

using conccl::DataType;
using conccl::ReduceOp;
using conccl::redtest::kOps;
using conccl::redtest::kTypes;
using conccl::redtest::random_elements;
using conccl::redtest::reference;

std::string last() { return conccl_last_error(); }

conccl_datatype c_type(DataType t) { return static_cast<conccl_datatype>(static_cast<int>(t)); }
conccl_redop c_op(ReduceOp op) { return static_cast<conccl_redop>(static_cast<int>(op)); }

enum class Call { reduce_scatter, all_reduce, reduce };
const char* call_name(Call c) {
  return c == Call::reduce_scatter ? "reduce_scatter" : c == Call::all_reduce ? "all_reduce" : "reduce";
}

conccl_status run_call(Call c, const conccl_buffer* send, const conccl_buffer* recv, size_t count, DataType t,
                       ReduceOp op, int root, conccl_comm_t comm, void* stream = nullptr) {
  switch (c) {
    case Call::reduce_scatter: return conccl_reduce_scatter(send, recv, count, c_type(t), c_op(op), comm, stream);
    case Call::all_reduce: return conccl_all_reduce(send, recv, count, c_type(t), c_op(op), comm, stream);
    case Call::reduce: break;
  }
  return conccl_reduce(send, recv, count, c_type(t), c_op(op), root, comm, stream);
}

using capitest::sub;

// Every rank in one process: 4 ranks on GPUs 0..3 of the emulated MI300X.
struct OneProcess {
  static constexpr int n = 4;
  conccl_device_t d = nullptr;
  conccl_comm_t comm = nullptr;
  OneProcess() {
    d = capitest::open_emu();
    const int gpus[n] = {0, 1, 2, 3};
    EXPECT_EQ(conccl_comm_create(d, gpus, n, nullptr, &comm), CONCCL_OK) << last();
  }
  ~OneProcess() {
    conccl_comm_destroy(comm);
    conccl_device_close(d);
  }
};

// One call on every rank of `p`: fresh random inputs uploaded, recv filled
// with 0xA5 (stale bytes), the call, every rank's result downloaded and
// compared with the reference; a reduce's other ranks' recv must stay
// stale. In place: all_reduce and reduce into send, reduce_scatter into this
// rank's chunk of send. zero_off_root: a reduce's other ranks pass a struct
// of zeros as recv. Returns "" or what went wrong.
std::string one_call(OneProcess& p, const std::vector<conccl_buffer>& sends, const std::vector<conccl_buffer>& recvs,
                     Call c, DataType t, ReduceOp op, size_t count, int root, bool in_place, bool zero_off_root,
                     uint64_t seed) {
  const int n = OneProcess::n;
  const size_t es = conccl::dtype_size(t);
  const size_t send_elems = c == Call::reduce_scatter ? count * n : count;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<conccl_buffer> send(n), recv(n);
  const std::vector<uint8_t> stale(count * es, 0xA5);
  for (int r = 0; r < n; ++r) {
    inputs.push_back(random_elements(t, send_elems, seed * 131 + r));
    send[r] = sub(sends[r], 0, send_elems * es);
    recv[r] = sub(recvs[r], 0, count * es);
    if (conccl_buffer_upload(p.d, &send[r], 0, inputs[r].data(), send_elems * es, 5000) != CONCCL_OK ||
        conccl_buffer_upload(p.d, &recv[r], 0, stale.data(), stale.size(), 5000) != CONCCL_OK)
      return "upload: " + last();
    if (in_place) recv[r] = c == Call::reduce_scatter ? sub(sends[r], r * count * es, count * es) : send[r];
    if (zero_off_root && c == Call::reduce && r != root) recv[r] = conccl_buffer{};
  }
  const std::string what = std::string(call_name(c)) + " " + conccl::dtype_name(t) + " " +
                           conccl::reduce_op_name(op) + " count " + std::to_string(count) + " root " +
                           std::to_string(root) + (in_place ? " in place" : "") + (zero_off_root ? " zero recv" : "");
  if (run_call(c, send.data(), recv.data(), count, t, op, root, p.comm) != CONCCL_OK) return what + ": " + last();
  std::vector<uint8_t> got(count * es);
  for (int r = 0; r < n; ++r) {
    if (c == Call::reduce && r != root) {
      if (in_place || zero_off_root) continue;
      if (conccl_buffer_download(p.d, got.data(), &recvs[r], 0, got.size(), 5000) != CONCCL_OK) return last();
      if (got != stale) return what + ": rank " + std::to_string(r) + "'s recv was written";
      continue;
    }
    if (conccl_buffer_download(p.d, got.data(), &recv[r], 0, got.size(), 5000) != CONCCL_OK) return last();
    const std::vector<uint8_t> want = reference(t, op, inputs, c == Call::reduce_scatter ? r * count * es : 0, count);
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i])
        return what + ": rank " + std::to_string(r) + " element " + std::to_string(i / es) + " differs";
  }
  return "";
}

struct OneProcessBuffers {
  std::vector<conccl_buffer> send, recv;
  OneProcessBuffers(OneProcess& p, size_t send_bytes, size_t recv_bytes) : send(OneProcess::n), recv(OneProcess::n) {
    for (int r = 0; r < OneProcess::n; ++r) {
      EXPECT_EQ(conccl_buffer_alloc(p.d, r, send_bytes, CONCCL_MEM_DEVICE, &send[r]), CONCCL_OK) << last();
      EXPECT_EQ(conccl_buffer_alloc(p.d, r, recv_bytes, CONCCL_MEM_DEVICE, &recv[r]), CONCCL_OK) << last();
    }
  }
};

TEST(CApiReductions, OneProcessEveryTypeAndOpBitExact) {
  OneProcess p;
  constexpr size_t count = 1003;  // not a multiple of the rank count or a vector width
  OneProcessBuffers b(p, count * OneProcess::n * 8, count * 8);
  uint64_t seed = 1;
  for (Call c : {Call::reduce_scatter, Call::all_reduce, Call::reduce})
    for (DataType t : kTypes)
      for (ReduceOp op : kOps) {
        ++seed;
        const int root = static_cast<int>(seed % OneProcess::n);
        ASSERT_EQ(one_call(p, b.send, b.recv, c, t, op, count, root, false, false, seed), "");
      }
  conccl_status async = CONCCL_ERR_INTERNAL;
  ASSERT_EQ(conccl_comm_get_async_error(p.comm, &async), CONCCL_OK) << last();
  EXPECT_EQ(async, CONCCL_OK);
}

// NCCL's in-place forms, a reduce whose other ranks pass structs of zeros
// as recv, and a count past one piece of the 64 MiB staging's two-step
// all-reduce threshold (256 KiB per rank: reduce-scatter + all-gather).
TEST(CApiReductions, OneProcessInPlaceZeroRecvAndLarge) {
  OneProcess p;
  constexpr size_t big = (80 << 10) + 3;  // float32: past 256 KiB, not a multiple of 4
  OneProcessBuffers b(p, big * OneProcess::n * 4, big * 4);
  uint64_t seed = 1000;
  for (Call c : {Call::reduce_scatter, Call::all_reduce, Call::reduce})
    for (DataType t : {DataType::f32, DataType::bf16, DataType::i64}) {
      const size_t count = t == DataType::i64 ? 777 : 4099;
      ASSERT_EQ(one_call(p, b.send, b.recv, c, t, ReduceOp::sum, count, 1, true, false, ++seed), "");
    }
  ASSERT_EQ(one_call(p, b.send, b.recv, Call::reduce, DataType::f16, ReduceOp::max, 3001, 2, false, true, ++seed), "");
  ASSERT_EQ(one_call(p, b.send, b.recv, Call::all_reduce, DataType::f32, ReduceOp::avg, big, 0, false, false, ++seed),
            "");
  ASSERT_EQ(one_call(p, b.send, b.recv, Call::all_reduce, DataType::bf16, ReduceOp::sum, big, 0, true, false, ++seed),
            "");
}

// The refusals: each names the C function and the fix, and the
// communicator stays usable.
TEST(CApiReductions, ArgumentErrorsNameTheFunctionAndTheFix) {
  OneProcess p;
  constexpr size_t count = 256;
  OneProcessBuffers b(p, count * OneProcess::n * 4, count * 4);
  auto refused = [&](conccl_status got, conccl_status want, const char* fn, const std::string& says) {
    EXPECT_EQ(got, want) << last();
    EXPECT_EQ(last().rfind(fn, 0), 0u) << "starts with the function: " << last();
    EXPECT_NE(last().find(says), std::string::npos) << "says '" << says << "': " << last();
  };
  const conccl_buffer* s = b.send.data();
  const conccl_buffer* r = b.recv.data();
  // Element types and operators NCCL numbers but this library does not reduce, and values of neither.
  refused(conccl_all_reduce(s, r, count, static_cast<conccl_datatype>(3), CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_INVALID_ARGUMENT, "conccl_all_reduce", "dt 3 is not a conccl_datatype: use CONCCL_UINT8 (1)");
  refused(conccl_reduce_scatter(s, r, count, static_cast<conccl_datatype>(-1), CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_INVALID_ARGUMENT, "conccl_reduce_scatter", "float64 have no reduction here");
  refused(conccl_reduce(s, r, count, CONCCL_FLOAT32, static_cast<conccl_redop>(9), 0, p.comm, nullptr),
          CONCCL_ERR_INVALID_ARGUMENT, "conccl_reduce", "op 9 is not a conccl_redop: use CONCCL_SUM (0)");
  // NULL buffers.
  refused(conccl_all_reduce(nullptr, r, count, CONCCL_FLOAT32, CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_INVALID_ARGUMENT, "conccl_all_reduce", "arrays of one buffer per rank (4)");
  refused(conccl_reduce(s, nullptr, count, CONCCL_FLOAT32, CONCCL_SUM, 0, p.comm, nullptr),
          CONCCL_ERR_INVALID_ARGUMENT, "conccl_reduce", "may be a struct of zeros");
  // A struct of zeros is a recv only off the root of a reduce.
  std::vector<conccl_buffer> zero_root(b.recv);
  zero_root[2] = conccl_buffer{};
  refused(conccl_reduce(s, zero_root.data(), count, CONCCL_FLOAT32, CONCCL_SUM, 2, p.comm, nullptr),
          CONCCL_ERR_NOT_FOUND, "conccl_reduce", "recv[2]: no live buffer");
  refused(conccl_all_reduce(s, zero_root.data(), count, CONCCL_FLOAT32, CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_NOT_FOUND, "conccl_all_reduce", "recv[2]: no live buffer");
  // Counts: 0, more than the buffers hold, and one whose bytes overflow.
  refused(conccl_all_reduce(s, r, 0, CONCCL_FLOAT32, CONCCL_SUM, p.comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
          "conccl_all_reduce", "count must be > 0 elements (NCCL takes 0 as a call that does nothing: skip the call");
  refused(conccl_reduce_scatter(s, r, 0, CONCCL_FLOAT32, CONCCL_SUM, p.comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
          "conccl_reduce_scatter", "recvcount must be > 0");
  refused(conccl_reduce_scatter(s, r, count + 1, CONCCL_FLOAT32, CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_INVALID_ARGUMENT, "conccl_reduce_scatter", "send buffer has 4096 bytes; 1028 elements of float");
  refused(conccl_all_reduce(s, r, SIZE_MAX / 2, CONCCL_INT64, CONCCL_SUM, p.comm, nullptr), CONCCL_ERR_OUT_OF_RANGE,
          "conccl_all_reduce", "do not fit 64-bit byte counts");
  refused(conccl_reduce_scatter(s, r, SIZE_MAX / 3, CONCCL_UINT8, CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_OUT_OF_RANGE, "conccl_reduce_scatter", "recvcount");
  // Root, stream, handles.
  refused(conccl_reduce(s, r, count, CONCCL_INT32, CONCCL_MIN, 4, p.comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
          "conccl_reduce", "root 4 is not a rank");
  int stream = 0;
  refused(conccl_all_reduce(s, r, count, CONCCL_FLOAT32, CONCCL_SUM, p.comm, &stream), CONCCL_ERR_UNAVAILABLE,
          "conccl_all_reduce", "needs the nv backend");
  refused(conccl_all_reduce(s, r, count, CONCCL_FLOAT32, CONCCL_SUM, nullptr, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
          "conccl_all_reduce", "comm");
  conccl_buffer freed;
  ASSERT_EQ(conccl_buffer_alloc(p.d, 1, count * 4, CONCCL_MEM_DEVICE, &freed), CONCCL_OK);
  ASSERT_EQ(conccl_buffer_free(p.d, &freed), CONCCL_OK);
  std::vector<conccl_buffer> stale_send(b.send);
  stale_send[1] = freed;
  refused(conccl_all_reduce(stale_send.data(), r, count, CONCCL_FLOAT32, CONCCL_SUM, p.comm, nullptr),
          CONCCL_ERR_NOT_FOUND, "conccl_all_reduce", "send[1]: no live buffer");
  // Still usable after every refusal.
  ASSERT_EQ(one_call(p, b.send, b.recv, Call::all_reduce, DataType::u8, ReduceOp::prod, count, 0, false, false, 77),
            "");
  EXPECT_EQ(last(), "");
  // A destroyed communicator.
  conccl_comm_t comm = p.comm;
  ASSERT_EQ(conccl_comm_destroy(comm), CONCCL_OK);
  p.comm = nullptr;
  refused(conccl_reduce(s, r, count, CONCCL_FLOAT32, CONCCL_SUM, 0, comm, nullptr), CONCCL_ERR_INVALID_ARGUMENT,
          "conccl_reduce", "comm");
}

// One process per rank (c_api_ranks.hpp; the communicator's calls' deadline
// 30 s): this rank's buffers alone. Each rank makes every rank's inputs from
// their seeds, so it checks its own result against the reference over all
// of them.
void per_process(int n) {
  capitest::run_ranks(n, 30000, [&](int r, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    constexpr size_t kMax = (64 << 10) + 5;  // float32: past the two-step all-reduce's 256 KiB
    conccl_buffer send_mem, recv_mem;
    if (conccl_buffer_alloc(d, r, kMax * n * 8, CONCCL_MEM_DEVICE, &send_mem) != CONCCL_OK ||
        conccl_buffer_alloc(d, r, kMax * 8, CONCCL_MEM_DEVICE, &recv_mem) != CONCCL_OK)
      return *out = last(), 5;
    uint64_t seed = 50;
    int step = 10;
    // One call: "" or what went wrong. recv_mode: 0 its recv buffer, 1 in
    // place, 2 NULL off the root of a reduce.
    auto one = [&](Call c, DataType t, ReduceOp op, size_t count, int root, int recv_mode) -> std::string {
      ++seed;
      const size_t es = conccl::dtype_size(t);
      const size_t send_elems = c == Call::reduce_scatter ? count * n : count;
      std::vector<std::vector<uint8_t>> inputs;
      for (int q = 0; q < n; ++q) inputs.push_back(random_elements(t, send_elems, seed * 131 + q));
      const conccl_buffer send = sub(send_mem, 0, send_elems * es);
      conccl_buffer recv = sub(recv_mem, 0, count * es);
      const std::vector<uint8_t> stale(count * es, 0xA5);
      if (conccl_buffer_upload(d, &send, 0, inputs[r].data(), send.size, 5000) != CONCCL_OK ||
          conccl_buffer_upload(d, &recv, 0, stale.data(), stale.size(), 5000) != CONCCL_OK)
        return "upload: " + last();
      if (recv_mode == 1) recv = c == Call::reduce_scatter ? sub(send_mem, r * count * es, count * es) : send;
      const bool off_root = c == Call::reduce && r != root;
      const conccl_buffer* rp = recv_mode == 2 && off_root ? nullptr : &recv;
      const std::string what = std::string(call_name(c)) + " " + conccl::dtype_name(t) + " " +
                               conccl::reduce_op_name(op) + " count " + std::to_string(count) + " recv mode " +
                               std::to_string(recv_mode);
      if (run_call(c, &send, rp, count, t, op, root, comm) != CONCCL_OK) return what + ": " + last();
      std::vector<uint8_t> got(count * es);
      if (conccl_buffer_download(d, got.data(), &recv, 0, got.size(), 5000) != CONCCL_OK) return last();
      if (off_root) {
        if (recv_mode != 1 && got != stale) return what + ": the recv of a rank other than the root was written";
        return "";
      }
      if (got != reference(t, op, inputs, c == Call::reduce_scatter ? r * count * es : 0, count))
        return what + ": WRONG";
      return "";
    };
    for (Call c : {Call::all_reduce, Call::reduce_scatter, Call::reduce})
      for (DataType t : {DataType::f32, DataType::bf16, DataType::i32})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg}) {
          const int root = static_cast<int>(seed % n);
          if (std::string e = one(c, t, op, 1001, root, static_cast<int>(seed % 3)); !e.empty()) return *out = e, step;
          ++step;
        }
    // The two-step all-reduce (256 KiB and more per rank), in place.
    if (std::string e = one(Call::all_reduce, DataType::f32, ReduceOp::sum, kMax, 0, 1); !e.empty())
      return *out = e, 60;
    // NULL send; a stream on the emulator: refused on every rank before the
    // call, so the next call still pairs up.
    const conccl_buffer recv = sub(recv_mem, 0, 64 * 4);
    if (conccl_all_reduce(nullptr, &recv, 64, CONCCL_FLOAT32, CONCCL_SUM, comm, nullptr) !=
            CONCCL_ERR_INVALID_ARGUMENT ||
        last().find("this rank's send buffer") == std::string::npos)
      return *out = "NULL send: " + last(), 61;
    if (r == 0 &&  // the root must give its recv; the others may not
        (conccl_reduce(&send_mem, nullptr, 64, CONCCL_FLOAT32, CONCCL_SUM, 0, comm, nullptr) !=
             CONCCL_ERR_INVALID_ARGUMENT ||
         last().find("on the root; other ranks may pass NULL") == std::string::npos))
      return *out = "NULL recv on the root: " + last(), 62;
    if (conccl_reduce_scatter(&send_mem, &recv, 64, CONCCL_FLOAT32, CONCCL_SUM, comm, reinterpret_cast<void*>(1)) !=
            CONCCL_ERR_UNAVAILABLE ||
        last().rfind("conccl_reduce_scatter", 0) != 0)
      return *out = "stream: " + last(), 63;
    if (std::string e = one(Call::reduce, DataType::i64, ReduceOp::prod, 333, n - 1, 2); !e.empty())
      return *out = e, 64;
    conccl_status async = CONCCL_ERR_INTERNAL;
    if (conccl_comm_get_async_error(comm, &async) != CONCCL_OK || async != CONCCL_OK) return *out = last(), 65;
    conccl_comm_destroy(comm);
    (void)conccl_buffer_free(d, &send_mem);
    (void)conccl_buffer_free(d, &recv_mem);
    conccl_device_close(d);
    return 0;
  });
}

TEST(CApiReductions, OneProcessPerRankTwoRanks) { per_process(2); }
TEST(CApiReductions, OneProcessPerRankThreeRanks) { per_process(3); }

}  // namespace
