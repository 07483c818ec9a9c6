// tests/c_api/heap_test.cpp - symmetric heaps (conccl_heap_*, src/c_api/heap.cpp)
// on the emulated backend with one forked process per rank: the same
// allocations and frees give the same offsets on every rank (first fit,
// 512-byte aligned), running out of heap returns NULL with a message, ranges
// of the heap go into the NCCL-shaped calls through its window (no message
// between the ranks), and misuse is refused with a message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "c_api/c_api_ranks.hpp"
#include "conccl/conccl.h"
#include "multiproc/fork_ranks.hpp"

namespace {

std::string last() { return conccl_last_error(); }

std::string torch_error() {
  size_t need = 0;
  if (conccl_heap_torch_error(nullptr, 0, &need) != CONCCL_OK) return "<conccl_heap_torch_error failed>";
  std::string s(need, '\0');
  if (conccl_heap_torch_error(s.data(), s.size(), &need) != CONCCL_OK) return "<conccl_heap_torch_error failed>";
  s.resize(need - 1);
  return s;
}

// Ranks in forked processes (c_api_ranks.hpp): their communicators' calls'
// deadline.
constexpr uint32_t kRankTimeoutMs = 20000;

// Whether the status is `want` and the message starts with `fn` and holds
// `says`; else *out says what came instead.
bool refused(conccl_status got, conccl_status want, const char* fn, const char* says, const std::string& what,
             std::string* out) {
  const std::string msg = last();
  if (got == want && msg.rfind(fn, 0) == 0 && msg.find(says) != std::string::npos) return true;
  *out = what + ": status " + std::to_string(got) + " (want " + std::to_string(want) + "), '" + msg + "'";
  return false;
}

}  // namespace

// The same pseudo-random sequence of allocations and frees on two ranks (half
// through conccl_heap_alloc/free, half through the PyTorch entry points)
// gives the same offsets on both; every offset is 512-aligned, inside the
// heap and clear of every live allocation; first fit is exact on a short
// sequence; running out returns NULL (PyTorch) or RESOURCE_EXHAUSTED, with a
// message saying what is free.
TEST(CApiHeap, SameSequenceSameOffsetsOnEveryRank) {
  constexpr int n = 2;
  constexpr size_t kAsk = (1u << 20) + 100;  // rounded up to 1 MiB + 512
  auto res = capitest::run_ranks(n, kRankTimeoutMs, [&](int, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_heap_t heap = nullptr;
    if (conccl_heap_create(comm, kAsk, &heap) != CONCCL_OK || !heap) return *out = last(), 5;
    conccl_heap_info info;
    if (conccl_heap_get_info(heap, &info) != CONCCL_OK) return *out = last(), 6;
    const uint64_t size = info.bytes, base = info.base;
    if (size != (1u << 20) + 512 || info.used != 0 || info.allocations != 0 || info.largest_free != size ||
        info.cuda_device != -1 || info.buffer.size != size || info.buffer.va != base)
      return *out = "info of a new heap: bytes " + std::to_string(size) + " used " + std::to_string(info.used), 7;
    if (conccl_heap_make_current(heap) != CONCCL_OK) return *out = last(), 8;

    struct Live {
      uint64_t size;  // rounded
      size_t asked;
      bool torch;
    };
    std::map<uint64_t, Live> live;  // offset ->
    std::string offsets;
    std::mt19937 rng(4242);  // the same on both ranks
    for (int step = 0; step < 400; ++step) {
      const bool torch = rng() % 2;
      if (live.empty() || rng() % 3 != 0) {
        const size_t ask = rng() % 3 == 0 ? rng() % 200000 : rng() % 5000;  // 0 included
        uint64_t p = 0;
        if (torch) {
          void* q = conccl_heap_torch_alloc(ask, 0, nullptr);
          p = reinterpret_cast<uintptr_t>(q);
          if (!q && torch_error().find("out of heap") == std::string::npos)
            return *out = "step " + std::to_string(step) + ": torch_alloc NULL: " + torch_error(), 9;
        } else {
          const conccl_status s = conccl_heap_alloc(heap, ask, &p);
          const bool oom = s == CONCCL_ERR_RESOURCE_EXHAUSTED && last().find("out of heap") != std::string::npos;
          if (s != CONCCL_OK && !oom)
            return *out = "step " + std::to_string(step) + ": " + last(), 10;
        }
        if (!p) {
          offsets += "X ";
          continue;
        }
        const uint64_t off = p - base, rounded = (std::max<size_t>(ask, 1) + 511) / 512 * 512;
        if (off % 512 || off + rounded > size) return *out = "offset " + std::to_string(off) + " misplaced", 11;
        auto next = live.lower_bound(off);
        if ((next != live.end() && next->first < off + rounded) ||
            (next != live.begin() && std::prev(next)->first + std::prev(next)->second.size > off))
          return *out = "offset " + std::to_string(off) + " overlaps a live allocation", 12;
        live[off] = {rounded, ask, torch};
        offsets += std::to_string(off) + " ";
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        if (it->second.torch) {
          conccl_heap_torch_free(reinterpret_cast<void*>(uintptr_t(base + it->first)), it->second.asked, 0, nullptr);
        } else if (conccl_heap_free(heap, base + it->first) != CONCCL_OK) {
          return *out = "free: " + last(), 13;
        }
        offsets += "-" + std::to_string(it->first) + " ";
        live.erase(it);
      }
    }
    if (torch_error().find("out of heap") == std::string::npos) return *out = "never ran out: " + torch_error(), 14;
    if (conccl_heap_get_info(heap, &info) != CONCCL_OK || info.allocations != live.size()) return *out = last(), 15;
    for (const auto& [off, l] : live) {
      if (l.torch)
        conccl_heap_torch_free(reinterpret_cast<void*>(uintptr_t(base + off)), l.asked, 0, nullptr);
      else if (conccl_heap_free(heap, base + off) != CONCCL_OK)
        return *out = last(), 16;
    }
    // Everything free again, the free ranges merged into one.
    if (conccl_heap_get_info(heap, &info) != CONCCL_OK || info.used != 0 || info.allocations != 0 ||
        info.largest_free != size)
      return *out = "after freeing all: used " + std::to_string(info.used) + ", largest free " +
                    std::to_string(info.largest_free), 17;

    // First fit, exactly.
    auto at = [&](size_t bytes) {
      uint64_t p = 0;
      return conccl_heap_alloc(heap, bytes, &p) == CONCCL_OK ? int64_t(p - base) : int64_t(-1);
    };
    const int64_t a = at(1000), b = at(1), c = at(512);
    if (a != 0 || b != 1024 || c != 1536)
      return *out = "a b c at " + std::to_string(a) + " " + std::to_string(b) + " " + std::to_string(c), 18;
    if (conccl_heap_free(heap, base + 0) != CONCCL_OK) return *out = last(), 19;
    const int64_t e = at(600), f = at(100);  // 600 -> 1024 fills [0, 1024); 100 goes after c
    if (conccl_heap_free(heap, base + 1024) != CONCCL_OK) return *out = last(), 20;
    const int64_t g = at(513), h = at(512);  // 513 -> 1024 does not fit b's 512-byte hole; 512 does
    if (e != 0 || f != 2048 || g != 2560 || h != 1024)
      return *out = "e f g h at " + std::to_string(e) + " " + std::to_string(f) + " " + std::to_string(g) + " " +
                    std::to_string(h), 21;
    for (int64_t o : {e, f, g, h, c})
      if (conccl_heap_free(heap, base + uint64_t(o)) != CONCCL_OK) return *out = last(), 22;

    // Out of heap: the whole heap fits once, then nothing does.
    void* all = conccl_heap_torch_alloc(size, 0, nullptr);
    if (all != reinterpret_cast<void*>(uintptr_t(base))) return *out = "whole heap: " + torch_error(), 23;
    if (conccl_heap_torch_alloc(1, 0, nullptr) != nullptr) return *out = "allocated past the end", 24;
    const std::string oom = torch_error();
    if (oom.rfind("conccl_heap_torch_alloc: out of heap: 1 bytes asked", 0) != 0 ||
        oom.find("0 bytes free") == std::string::npos)
      return *out = "out-of-heap message: " + oom, 25;
    uint64_t p = 7;
    if (!refused(conccl_heap_alloc(heap, 1, &p), CONCCL_ERR_RESOURCE_EXHAUSTED, "conccl_heap_alloc", "out of heap",
                 "alloc past the end", out))
      return 26;
    if (p != 0) return *out = "ptr not 0 after a refusal", 27;
    conccl_heap_torch_free(all, size, 0, nullptr);
    if (conccl_heap_alloc(heap, size + 1, &p) != CONCCL_ERR_RESOURCE_EXHAUSTED) return *out = "too large", 28;

    if (conccl_heap_destroy(heap) != CONCCL_OK) return *out = last(), 29;
    conccl_comm_destroy(comm);
    conccl_device_close(d);
    *out = offsets;
    return 0;
  });
  ASSERT_EQ(res.size(), 2u);
  EXPECT_GT(res[0].out.size(), 400u) << res[0].out;
  EXPECT_EQ(res[0].out, res[1].out) << "the ranks' offsets differ";
}

// Ranges of the heap (conccl_heap_buffer) go into conccl_all_gather,
// conccl_all_to_all and conccl_broadcast through its window: every byte
// checked, no bootstrap message per call. The structs are sub-ranges the
// device's checks accept, and conccl_buffer_free refuses them.
TEST(CApiHeap, HeapBuffersGoThroughTheWindow) {
  constexpr int n = 2, kRounds = 10;
  constexpr size_t chunk = 24576 + 40;
  auto data = [](int r, int round) { return capitest::rank_data(chunk * n, 9000, r, round); };
  capitest::run_ranks(n, kRankTimeoutMs, [&](int r, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_heap_t heap = nullptr;
    if (conccl_heap_create(comm, 1u << 20, &heap) != CONCCL_OK) return *out = last(), 5;
    if (conccl_heap_make_current(heap) != CONCCL_OK) return *out = last(), 6;
    // Something first, so that the buffers do not start at offset 0.
    uint64_t pad = 0, ps = 0;
    if (conccl_heap_alloc(heap, 3000, &pad) != CONCCL_OK || conccl_heap_alloc(heap, chunk * n, &ps) != CONCCL_OK)
      return *out = last(), 7;
    void* precv = conccl_heap_torch_alloc(chunk * n, 0, nullptr);  // as PyTorch's MemPool would
    if (!precv) return *out = torch_error(), 8;
    const uint64_t pr = reinterpret_cast<uintptr_t>(precv);
    conccl_buffer send, recv, whole_send;
    if (conccl_heap_buffer(heap, ps, chunk, &send) != CONCCL_OK ||
        conccl_heap_buffer(heap, ps, chunk * n, &whole_send) != CONCCL_OK ||
        conccl_heap_buffer(heap, pr, chunk * n, &recv) != CONCCL_OK)
      return *out = last(), 9;
    conccl_heap_info info;
    if (conccl_heap_get_info(heap, &info) != CONCCL_OK) return *out = last(), 10;
    if (send.id != info.buffer.id || send.va != info.buffer.va + (ps - info.base) || send.size != chunk ||
        !send.host || send.kind != CONCCL_MEM_DEVICE || send.gpu != r)
      return *out = "send struct", 11;
    conccl_comm_stats before, after;
    if (conccl_comm_get_stats(comm, &before) != CONCCL_OK) return *out = last(), 12;
    std::vector<uint8_t> got(chunk * n);
    for (int round = 0; round < kRounds + 2; ++round) {
      const std::vector<uint8_t> mine = data(r, round);
      const bool a2a = round == kRounds, bcast = round == kRounds + 1;
      if (conccl_buffer_upload(d, &whole_send, 0, mine.data(), mine.size(), 5000) != CONCCL_OK)
        return *out = last(), 13;
      conccl_status s;
      if (a2a)
        s = conccl_all_to_all(&whole_send, &recv, chunk, comm, nullptr);
      else if (bcast)  // from rank 1; rank 0 gives the root's place (the same offsets)
        s = conccl_broadcast(&whole_send, &recv, chunk * n, 1, comm, nullptr);
      else
        s = conccl_all_gather(&send, &recv, chunk, comm, nullptr);
      if (s != CONCCL_OK) return *out = "round " + std::to_string(round) + ": " + last(), 14;
      if (conccl_buffer_download(d, got.data(), &recv, 0, got.size(), 5000) != CONCCL_OK) return *out = last(), 15;
      for (int q = 0; q < n; ++q) {
        const std::vector<uint8_t> from = data(bcast ? 1 : q, round);
        const uint8_t* want = from.data() + (bcast ? q * chunk : a2a ? r * chunk : 0);
        if (std::memcmp(got.data() + q * chunk, want, chunk) != 0)
          return *out = "round " + std::to_string(round) + " chunk " + std::to_string(q) + " WRONG", 16;
      }
    }
    if (conccl_comm_get_stats(comm, &after) != CONCCL_OK) return *out = last(), 17;
    if (after.bootstrap_messages_sent != before.bootstrap_messages_sent ||
        after.bootstrap_messages_received != before.bootstrap_messages_received ||
        after.window_calls - before.window_calls != kRounds + 2)
      return *out = "messages sent " + std::to_string(after.bootstrap_messages_sent - before.bootstrap_messages_sent) +
                    ", window calls " + std::to_string(after.window_calls - before.window_calls), 18;
    // Not freeable as a buffer, not even as the whole heap.
    if (!refused(conccl_buffer_free(d, &send), CONCCL_ERR_INVALID_ARGUMENT, "conccl_buffer_free", "sub-range",
                 "conccl_buffer_free of a heap range", out))
      return 19;
    if (!refused(conccl_buffer_free(d, &info.buffer), CONCCL_ERR_INVALID_ARGUMENT, "conccl_buffer_free", "sub-range",
                 "conccl_buffer_free of the whole heap", out))
      return 20;
    conccl_heap_torch_free(precv, chunk * n, 0, nullptr);
    if (conccl_heap_free(heap, ps) != CONCCL_OK || conccl_heap_free(heap, pad) != CONCCL_OK) return *out = last(), 21;
    if (conccl_heap_destroy(heap) != CONCCL_OK) return *out = last(), 22;
    // The heap's window is gone: its old ranges are no buffers of the device.
    if (conccl_all_gather(&send, &recv, chunk, comm, nullptr) != CONCCL_ERR_NOT_FOUND) return *out = "stale range", 23;
    if (!refused(conccl_heap_buffer(heap, ps, chunk, &send), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_buffer",
                 "destroyed", "a destroyed heap", out))
      return 24;
    conccl_comm_destroy(comm);
    conccl_device_close(d);
    return 0;
  });
}

// Misuse, on 2 ranks: every refusal names the C function and says what is
// wrong, and the communicator and the heap stay usable after it.
TEST(CApiHeap, Misuse) {
  constexpr int n = 2;
  capitest::run_ranks(n, kRankTimeoutMs, [&](int r, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_heap_t heap = reinterpret_cast<conccl_heap_t>(uintptr_t(1));
    // Refused before any exchange, on every rank alike.
    if (!refused(conccl_heap_create(comm, 4096, nullptr), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_create", "NULL",
                 "NULL heap", out))
      return 5;
    if (!refused(conccl_heap_create(comm, 0, &heap), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_create", "bytes",
                 "0 bytes", out))
      return 6;
    if (heap) return *out = "heap not NULL after a refusal", 7;
    if (!refused(conccl_heap_create(nullptr, 4096, &heap), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_create", "comm",
                 "NULL comm", out))
      return 8;
    // Different sizes: refused on every rank, naming both.
    if (!refused(conccl_heap_create(comm, r == 0 ? 4096 : 8192, &heap), CONCCL_ERR_INVALID_ARGUMENT,
                 "conccl_heap_create", "every rank gives the same bytes", "mismatched sizes", out))
      return 9;
    const char* names_both = r == 0 ? "rank 1 asks for a heap of 8192 bytes, rank 0 for 4096"
                                    : "rank 0 asks for a heap of 4096 bytes, rank 1 for 8192";
    if (last().find(names_both) == std::string::npos)
      return *out = "mismatch message: " + last(), 10;
    // Still usable: a heap of one size.
    if (conccl_heap_create(comm, 65536, &heap) != CONCCL_OK) return *out = last(), 11;
    conccl_heap_info info;
    if (conccl_heap_get_info(heap, &info) != CONCCL_OK) return *out = last(), 12;
    uint64_t p = 0;
    if (conccl_heap_alloc(heap, 4096, &p) != CONCCL_OK) return *out = last(), 13;
    conccl_buffer b;
    // Pointers outside the heap; a range past its end; no bytes.
    if (!refused(conccl_heap_buffer(heap, info.base - 512, 16, &b), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_buffer",
                 "outside the heap", "a pointer below the heap", out))
      return 14;
    if (!refused(conccl_heap_buffer(heap, info.base + info.bytes, 16, &b), CONCCL_ERR_INVALID_ARGUMENT,
                 "conccl_heap_buffer", "outside the heap", "a pointer past the heap", out))
      return 15;
    if (!refused(conccl_heap_buffer(heap, info.base + info.bytes - 512, 1024, &b), CONCCL_ERR_OUT_OF_RANGE,
                 "conccl_heap_buffer", "run past the end", "a range past the end", out))
      return 16;
    if (!refused(conccl_heap_buffer(heap, p, 0, &b), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_buffer", "bytes",
                 "0 bytes", out))
      return 17;
    if (!refused(conccl_heap_buffer(heap, p, 16, nullptr), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_buffer", "NULL",
                 "NULL buffer", out))
      return 18;
    // Frees of what is not an allocation.
    if (!refused(conccl_heap_free(heap, p + 512), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_free", "lies inside",
                 "a pointer inside an allocation", out))
      return 19;
    if (!refused(conccl_heap_free(heap, info.base - 1), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_free",
                 "outside the heap", "a pointer outside", out))
      return 20;
    if (conccl_heap_free(heap, p) != CONCCL_OK) return *out = last(), 21;
    if (!refused(conccl_heap_free(heap, p), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_free", "freed already",
                 "a double free", out))
      return 22;
    // Another kind of handle.
    if (!refused(conccl_heap_alloc(reinterpret_cast<conccl_heap_t>(comm), 16, &p), CONCCL_ERR_INVALID_ARGUMENT,
                 "conccl_heap_alloc", "a communicator handle was given where a heap handle is expected",
                 "a comm as a heap", out))
      return 23;
    // The PyTorch entry points: no current heap, a foreign pointer, a wrong size.
    if (conccl_heap_make_current(nullptr) != CONCCL_OK) return *out = last(), 24;
    if (conccl_heap_torch_alloc(16, 0, nullptr) != nullptr ||
        torch_error().find("no heap is current") == std::string::npos)
      return *out = "no current heap: " + torch_error(), 25;
    std::vector<uint8_t> foreign(64);
    conccl_heap_torch_free(foreign.data(), foreign.size(), 0, nullptr);  // recorded, nothing else
    if (torch_error().find("in no live ConCCL heap") == std::string::npos)
      return *out = "foreign: " + torch_error(), 26;
    conccl_heap_torch_free(nullptr, 0, 0, nullptr);  // as free(NULL): nothing
    if (conccl_heap_make_current(heap) != CONCCL_OK) return *out = last(), 27;
    void* t = conccl_heap_torch_alloc(100, 0, nullptr);
    if (!t) return *out = torch_error(), 28;
    conccl_heap_torch_free(t, 99, 0, nullptr);
    if (torch_error().find("allocated with 100 bytes and freed with 99") == std::string::npos)
      return *out = "wrong size: " + torch_error(), 29;
    if (conccl_heap_get_info(heap, &info) != CONCCL_OK || info.allocations != 0) return *out = "freed anyway", 30;
    char tiny[4];
    size_t need = 0;
    if (conccl_heap_torch_error(tiny, sizeof tiny, &need) != CONCCL_ERR_OUT_OF_RANGE || need <= sizeof tiny ||
        std::strlen(tiny) != 3)
      return *out = "small buffer", 31;
    // Destroyed: the handle is stale, and no longer current.
    if (conccl_heap_destroy(heap) != CONCCL_OK) return *out = last(), 32;
    if (!refused(conccl_heap_alloc(heap, 16, &p), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_alloc", "destroyed",
                 "a destroyed heap", out))
      return 33;
    if (!refused(conccl_heap_destroy(heap), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_destroy", "destroyed",
                 "destroying twice", out))
      return 34;
    if (conccl_heap_torch_alloc(16, 0, nullptr) != nullptr ||
        torch_error().find("no heap is current") == std::string::npos)
      return *out = "destroyed current heap: " + torch_error(), 35;
    if (conccl_heap_destroy(nullptr) != CONCCL_OK) return *out = last(), 36;
    // A destroyed communicator makes its heap unusable; destroy still frees it.
    conccl_heap_t h2 = nullptr;
    if (conccl_heap_create(comm, 8192, &h2) != CONCCL_OK) return *out = last(), 37;
    if (conccl_heap_make_current(h2) != CONCCL_OK || conccl_heap_alloc(h2, 512, &p) != CONCCL_OK)
      return *out = last(), 38;
    void* t2 = conccl_heap_torch_alloc(512, 0, nullptr);
    if (!t2) return *out = torch_error(), 39;
    if (conccl_comm_destroy(comm) != CONCCL_OK) return *out = last(), 40;
    if (!refused(conccl_heap_alloc(h2, 16, &p), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_alloc",
                 "communicator was destroyed", "a heap of a destroyed communicator", out))
      return 41;
    if (!refused(conccl_heap_buffer(h2, p, 16, &b), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_buffer",
                 "communicator was destroyed", "a range of a heap of a destroyed communicator", out))
      return 42;
    if (conccl_heap_torch_alloc(16, 0, nullptr) != nullptr ||
        torch_error().find("communicator was destroyed") == std::string::npos)
      return *out = "torch alloc on a heap of a destroyed communicator: " + torch_error(), 43;
    const std::string before_late_free = torch_error();
    conccl_heap_torch_free(t2, 512, 0, nullptr);  // PyTorch freeing late: bookkeeping only, no error
    if (torch_error() != before_late_free) return *out = "late free: " + torch_error(), 44;
    if (conccl_heap_destroy(h2) != CONCCL_OK) return *out = last(), 45;
    conccl_device_close(d);
    return 0;
  });
}

// A device closed under a live heap frees its memory; the heap's calls then
// say so, and conccl_heap_destroy still works.
TEST(CApiHeap, DeviceClosedFirst) {
  capitest::run_ranks(2, kRankTimeoutMs, [&](int, conccl_device_t d, conccl_comm_t comm, std::string* out) {
    conccl_heap_t heap = nullptr;
    if (conccl_heap_create(comm, 16384, &heap) != CONCCL_OK) return *out = last(), 5;
    uint64_t p = 0;
    if (conccl_heap_alloc(heap, 100, &p) != CONCCL_OK) return *out = last(), 6;
    if (conccl_device_close(d) != CONCCL_OK) return *out = last(), 7;
    conccl_buffer b;
    if (!refused(conccl_heap_buffer(heap, p, 100, &b), CONCCL_ERR_INVALID_ARGUMENT, "conccl_heap_buffer",
                 "device closed", "a heap of a closed device", out))
      return 8;
    if (conccl_heap_destroy(heap) != CONCCL_OK) return *out = last(), 9;
    return 0;
  });
}

// A communicator of every rank in one process has no heap.
TEST(CApiHeap, NeedsOneProcessPerRank) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  conccl_device_t d = nullptr;
  ASSERT_EQ(conccl_device_open(&o, &d), CONCCL_OK) << last();
  conccl_comm_t comm = nullptr;
  const int gpus[] = {0, 1};
  ASSERT_EQ(conccl_comm_create(d, gpus, 2, nullptr, &comm), CONCCL_OK) << last();
  conccl_heap_t heap = nullptr;
  EXPECT_EQ(conccl_heap_create(comm, 4096, &heap), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(last().rfind("conccl_heap_create", 0), 0u) << last();
  EXPECT_NE(last().find("one process per rank"), std::string::npos) << last();
  EXPECT_EQ(heap, nullptr);
  EXPECT_EQ(conccl_comm_destroy(comm), CONCCL_OK);
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK);
}
