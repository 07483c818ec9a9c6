// tests/queue/multi_producer_test.cpp - many producers, queues and engines at once.
//
// Each producer owns a tagged stream: every sequence number is one packet —
// a WRITE of 1..8 tagged dwords into the stream's slot seq, an atomic add64
// to the stream's sum, a link of the stream's cmpswap chain, or a COPY of
// {sum, chain} into slot seq (which must equal the stream's own program
// order at that point, whatever the other producers interleave). Streams may
// also carry a bulk copy of random data, issued in random chunks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

using namespace conccl::test;  // with the sdma:: packet names (emu_test_util.hpp)

constexpr uint64_t kSlotDwords = 8;

enum Kind : uint8_t { kWrite, kAdd, kChain, kSnap };

struct Stream {
  uint32_t tag = 0;
  uint64_t seqs = 0;  // how many sequence numbers to issue
  Buffer slots;       // seqs * kSlotDwords dwords
  Buffer ctr;         // [0] sum, [1] chain
  // Optional bulk copy src -> dst, in random chunks.
  Buffer bulk_src, bulk_dst;
  uint64_t bulk_done = 0;
  // Program-order model.
  std::vector<Kind> kind;
  std::vector<uint8_t> len;
  std::vector<uint64_t> snap_sum, snap_chain;
  uint64_t sum = 0, chain = 0;
  std::string error;  // first failure in the producer thread
};

uint32_t payload(uint32_t tag, uint64_t seq, uint64_t i) {
  return static_cast<uint32_t>(mix64((uint64_t(tag) << 40) ^ (seq << 4) ^ i)) | 1u;
}

// Issues s.seqs packets to q in random batches (plus the bulk copy chunks).
void produce(Queue& q, Stream& s, uint64_t seed, size_t max_batch) {
  std::mt19937_64 rng(seed);
  CommandBuffer cb = q.command_buffer();
  s.kind.resize(s.seqs);
  s.len.resize(s.seqs);
  s.snap_sum.resize(s.seqs);
  s.snap_chain.resize(s.seqs);
  uint32_t data[kSlotDwords];
  auto fail = [&](const Status& st, const char* what) {
    if (s.error.empty()) s.error = std::string(what) + ": " + st.to_string();
  };
  uint64_t seq = 0;
  while ((seq < s.seqs || s.bulk_done < s.bulk_src.size) && s.error.empty()) {
    cb.clear();
    const size_t n = 1 + rng() % max_batch;
    for (size_t k = 0; k < n && seq < s.seqs; ++k, ++seq) {
      const unsigned r = static_cast<unsigned>(rng() % 100);
      const uint64_t slot_va = s.slots.va_at(seq * kSlotDwords * 4);
      Status st;
      if (r < 55) {
        s.kind[seq] = kWrite;
        s.len[seq] = static_cast<uint8_t>(1 + rng() % kSlotDwords);
        for (uint64_t i = 0; i < s.len[seq]; ++i) data[i] = payload(s.tag, seq, i);
        st = SdmaPackets(cb).write(slot_va, std::span<const uint32_t>(data, s.len[seq]));
      } else if (r < 70) {
        s.kind[seq] = kAdd;
        const int64_t v = static_cast<int64_t>(rng() % 20001) - 10000;
        s.sum += static_cast<uint64_t>(v);
        st = SdmaPackets(cb).atomic_add64(s.ctr.va, v);
      } else if (r < 85) {
        s.kind[seq] = kChain;
        const FieldValue f[] = {{Key::op, 40}, {Key::addr, s.ctr.va_at(8)}, {Key::value, seq + 1}, {Key::cmp, s.chain}};
        st = SdmaPackets(cb).packet(Pkt::atomic, f);
        s.chain = seq + 1;
      } else {
        s.kind[seq] = kSnap;
        s.snap_sum[seq] = s.sum;
        s.snap_chain[seq] = s.chain;
        st = cb.copy(slot_va, s.ctr.va, 16);
      }
      if (!st.ok()) return fail(st, "record");
    }
    // Interleave a chunk of the bulk copy.
    if (s.bulk_done < s.bulk_src.size && (rng() % 4 == 0 || seq >= s.seqs)) {
      const uint64_t chunk = std::min<uint64_t>(s.bulk_src.size - s.bulk_done, 1 + rng() % (64 << 10));
      Status st = cb.copy(s.bulk_dst.va_at(s.bulk_done), s.bulk_src.va_at(s.bulk_done), chunk);
      if (!st.ok()) return fail(st, "record bulk");
      s.bulk_done += chunk;
    }
    Status st = q.submit(cb, long_deadline());
    if (!st.ok()) return fail(st, "submit");
  }
}

::testing::AssertionResult verify(const Stream& s) {
  if (!s.error.empty()) return ::testing::AssertionFailure() << "stream " << s.tag << ": " << s.error;
  const auto* slots = s.slots.as<const uint32_t>();
  for (uint64_t seq = 0; seq < s.seqs; ++seq) {
    const uint32_t* slot = slots + seq * kSlotDwords;
    if (s.kind[seq] == kWrite) {
      for (uint64_t i = 0; i < s.len[seq]; ++i)
        if (slot[i] != payload(s.tag, seq, i))
          return ::testing::AssertionFailure() << "stream " << s.tag << " write " << seq << " dword " << i
                                               << ": got " << hex(slot[i]) << ", want "
                                               << hex(payload(s.tag, seq, i));
      for (uint64_t i = s.len[seq]; i < kSlotDwords; ++i)
        if (slot[i] != 0)
          return ::testing::AssertionFailure() << "stream " << s.tag << " write " << seq << " spilled into dword " << i;
    } else if (s.kind[seq] == kSnap) {
      uint64_t got[2];
      std::memcpy(got, slot, 16);
      if (got[0] != s.snap_sum[seq] || got[1] != s.snap_chain[seq])
        return ::testing::AssertionFailure() << "stream " << s.tag << " snapshot " << seq << ": {" << hex(got[0])
                                             << ", " << hex(got[1]) << "}, want {" << hex(s.snap_sum[seq]) << ", "
                                             << hex(s.snap_chain[seq]) << "}";
    } else {
      for (uint64_t i = 0; i < kSlotDwords; ++i)
        if (slot[i] != 0) return ::testing::AssertionFailure() << "stream " << s.tag << " slot " << seq << " written";
    }
  }
  if (host_load64(s.ctr.as<uint64_t>()) != s.sum)
    return ::testing::AssertionFailure() << "stream " << s.tag << " sum " << hex(host_load64(s.ctr.as<uint64_t>()))
                                         << ", want " << hex(s.sum);
  if (host_load64(s.ctr.as<uint64_t>() + 1) != s.chain)
    return ::testing::AssertionFailure() << "stream " << s.tag << " chain stopped at "
                                         << host_load64(s.ctr.as<uint64_t>() + 1) << " of " << s.chain;
  if (s.bulk_src.size) {
    ::testing::AssertionResult r = bytes_equal(s.bulk_dst.host, s.bulk_src.host, s.bulk_src.size);
    if (!r) return r << " (stream " << s.tag << " bulk copy)";
  }
  return ::testing::AssertionSuccess();
}

// Scale: enough to interleave heavily, small enough for TSan on two cores.
constexpr uint64_t kSeqs = kSanitized ? 4000 : 20000;

class MultiProducer : public ::testing::Test {
 protected:
  void make_stream(Stream& s, uint32_t tag, int gpu, uint64_t seqs, size_t bulk_bytes = 0, int bulk_src_gpu = 0) {
    s.tag = tag;
    s.seqs = seqs;
    ASSERT_OK_AND_ASSIGN(s.slots, dev_->alloc(gpu, seqs * kSlotDwords * 4, MemKind::device));
    ASSERT_OK_AND_ASSIGN(s.ctr, dev_->alloc(gpu, 256, MemKind::device));
    if (bulk_bytes) {
      ASSERT_OK_AND_ASSIGN(s.bulk_src, dev_->alloc(bulk_src_gpu, bulk_bytes, MemKind::device));
      ASSERT_OK_AND_ASSIGN(s.bulk_dst, dev_->alloc(gpu, bulk_bytes, MemKind::device));
      fill_random(s.bulk_src.host, bulk_bytes, rng_);
    }
  }
  std::mt19937_64 rng_{0x5EED};
  std::unique_ptr<emu::EmuDevice> dev_;
};

TEST_F(MultiProducer, FourThreadsShareOneQueue) {
  ASSERT_OK_AND_ASSIGN(dev_, make_small());
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev_, 0, 0, 16384));
  constexpr int kThreads = 4;
  std::vector<Stream> streams(kThreads);
  for (int t = 0; t < kThreads; ++t) ASSERT_NO_FATAL_FAILURE(make_stream(streams[t], 100 + t, 0, kSeqs));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { produce(*q, streams[t], 1000 + t, 24); });
  for (auto& th : threads) th.join();
  ASSERT_OK(q->wait_done(long_deadline()));
  for (const Stream& s : streams) EXPECT_TRUE(verify(s));
  EXPECT_GT(q->submitted(), 20 * q->ring_bytes()) << "the ring should have wrapped many times";
}

TEST_F(MultiProducer, FourQueuesOnOneEngine) {
  ASSERT_OK_AND_ASSIGN(dev_, make_small());
  constexpr int kQueues = 4;
  std::vector<std::unique_ptr<Queue>> qs(kQueues);
  std::vector<Stream> streams(kQueues);
  for (int i = 0; i < kQueues; ++i) {
    ASSERT_OK_AND_ASSIGN(qs[i], make_queue(*dev_, 0, 1, 8192));
    ASSERT_NO_FATAL_FAILURE(make_stream(streams[i], 200 + i, 0, kSeqs / 2, 256 << 10, 1));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kQueues; ++i)
    threads.emplace_back([&, i] { produce(*qs[i], streams[i], 2000 + i, 16); });
  for (auto& th : threads) th.join();
  for (int i = 0; i < kQueues; ++i) {
    ASSERT_OK(qs[i]->wait_done(long_deadline()));
    EXPECT_TRUE(verify(streams[i]));
  }
}

TEST_F(MultiProducer, QueuesOnEveryEngineOfTwoGpus) {
  ASSERT_OK_AND_ASSIGN(dev_, make_small(2, 4));
  std::vector<std::unique_ptr<Queue>> qs;
  std::vector<Stream> streams(8);
  for (int g = 0; g < 2; ++g)
    for (int e = 0; e < 4; ++e) {
      const int i = g * 4 + e;
      std::unique_ptr<Queue> q;
      ASSERT_OK_AND_ASSIGN(q, make_queue(*dev_, g, e, 8192));
      qs.push_back(std::move(q));
      // Each stream lives on its queue's GPU and pulls 512 KiB from the peer.
      ASSERT_NO_FATAL_FAILURE(make_stream(streams[i], 300 + i, g, kSeqs / 4, 512 << 10, 1 - g));
    }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < qs.size(); ++i)
    threads.emplace_back([&, i] { produce(*qs[i], streams[i], 3000 + i, 16); });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < qs.size(); ++i) {
    ASSERT_OK(qs[i]->wait_done(long_deadline()));
    EXPECT_TRUE(verify(streams[i]));
  }
  // Every engine did work.
  for (int g = 0; g < 2; ++g)
    for (int e = 0; e < 4; ++e) {
      emu::EngineStats st;
      ASSERT_OK_AND_ASSIGN(st, dev_->engine_stats(g, e));
      EXPECT_GT(st.packets, kSeqs / 4) << "gpu " << g << " engine " << e;
      EXPECT_GE(st.bytes_copied, 512u << 10) << "gpu " << g << " engine " << e;
    }
}

TEST_F(MultiProducer, APollBlocksOnlyItsOwnQueue) {
  ASSERT_OK_AND_ASSIGN(dev_, make_small());
  std::unique_ptr<Queue> a, b;
  ASSERT_OK_AND_ASSIGN(a, make_queue(*dev_, 0, 2));
  ASSERT_OK_AND_ASSIGN(b, make_queue(*dev_, 0, 2));
  Buffer flag, marker;
  ASSERT_OK_AND_ASSIGN(flag, dev_->alloc(-1, 256, MemKind::host));
  ASSERT_OK_AND_ASSIGN(marker, dev_->alloc(0, 256, MemKind::device));
  const std::vector<uint32_t> mark = random_dwords(4, rng_);

  CommandBuffer ca = a->command_buffer();
  ASSERT_OK(SdmaPackets(ca).poll(flag.va, 1, 0xFFFFFFFF, PollFunc::eq));
  ASSERT_OK(SdmaPackets(ca).write(marker.va, mark));
  ASSERT_OK(a->submit(ca, long_deadline()));
  // Wait (with a deadline) until the engine reports A's poll.
  const Deadline d = long_deadline();
  while (a->engine_status().state != EngineStatus::State::polling && !d.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EngineStatus es = a->engine_status();
  ASSERT_EQ(es.state, EngineStatus::State::polling) << a->diagnose();
  EXPECT_EQ(es.wait.queue, a->id());
  EXPECT_EQ(es.wait.addr, flag.va);
  EXPECT_EQ(es.wait.target, 1u);
  EXPECT_EQ(es.wait.seen, 0u);
  EXPECT_EQ(es.wait.compare, EngineStatus::Compare::eq);  // PollFunc::eq

  // B, on the same engine, runs thousands of packets meanwhile; a monitor
  // asks for B's engine status all along: it must never call B the poller.
  Stream s;
  ASSERT_NO_FATAL_FAILURE(make_stream(s, 400, 0, kSeqs / 4));
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, looks{0};
  std::thread monitor([&] {
    while (!stop.load()) {
      wrong += b->engine_status().state == EngineStatus::State::polling;
      ++looks;
      std::this_thread::yield();
    }
  });
  produce(*b, s, 4000, 32);
  ASSERT_OK(b->wait_done(long_deadline()));
  stop.store(true);
  monitor.join();
  EXPECT_EQ(wrong.load(), 0) << "of " << looks.load() << " looks";
  EXPECT_TRUE(verify(s));
  EXPECT_NE(b->engine_status().state, EngineStatus::State::polling) << "B is not the queue that polls";

  // A is still parked on its poll, and its diagnosis says why.
  EXPECT_LT(a->completed(), a->submitted());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(host_load32(marker.as<uint32_t>() + i), 0u);
  Status st = a->wait_done(Deadline::after_ms(20));
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_TRUE(contains(st.message(), "POLL_REGMEM")) << st.message();
  EXPECT_TRUE(contains(st.message(), hex(flag.va))) << st.message();

  host_store32(flag.host, 1);
  dev_->wake_pollers();
  ASSERT_OK(a->wait_done(long_deadline()));
  EXPECT_TRUE(bytes_equal(marker.host, mark.data(), 16));
}

}  // namespace
}  // namespace conccl
