// src/collectives/call_trace.hpp - CONCCL_CALL_TRACE=<prefix>: when each
// window call's counters (calls.hpp) reached their values, as rank 0's host
// saw them, for finding where a call's time goes across processes.
//
// Every rank's call area is mapped in every process, so one thread of rank
// 0's process can watch every rank's posted, arrive and sent words. It spins
// on them (a core of its own while the communicator lives) and stamps, per
// call k and per word, the first moment (steady_clock, shared by the
// node's processes) the word reached its value after call k: posted k, and
// the arrive and sent values that every rank's host computes for call k
// (CallState::base). A word reached from an engine's or a stream's store
// is seen within the time the store takes to land in host memory, which
// the trace cannot tell apart from the store's own delay.
//
// Each stamp is taken just after the read that saw the word there, so it
// comes after the store by at most one pass over the words (a pass reads
// each word once); of two words stored one after the other, the later one
// may be stamped first by up to one pass. At destruction it writes
// <prefix>.<pid>.csv: a comment line with the longest pass, then one row per
// call (the last kRows), columns k, then posted_r, arrive_r, sent_r for
// each rank r, in ns since the trace began (empty where the word did not
// get there).
// tools/bench/call_trace.py sums the rows up.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace conccl {

class CallTrace {
 public:
  static constexpr uint64_t kRows = 1 << 15;  // calls kept (the last ones)

  // words: the host mappings of every rank's posted, arrive and sent words,
  // in that order per rank (3 × ranks). Starts the watching thread.
  CallTrace(std::vector<const uint64_t*> words, std::string path);
  ~CallTrace();  // stops the thread, writes the file
  CallTrace(const CallTrace&) = delete;
  CallTrace& operator=(const CallTrace&) = delete;

  // Call k (k = 1, 2, ... in order): the value each word reaches with it.
  void note_call(uint64_t k, const std::vector<uint64_t>& targets);
  // The file written at destruction.
  const std::string& path() const { return path_; }

 private:
  void watch();
  void write() const;

  std::vector<const uint64_t*> words_;
  std::string path_;
  size_t w_;                      // words per row
  std::vector<uint64_t> target_;  // kRows × w_, by k % kRows
  std::vector<int64_t> seen_;     // kRows × w_: ns, or -1
  std::atomic<uint64_t> noted_{0};  // calls noted (their rows are written)
  std::atomic<bool> stop_{false};
  int64_t longest_pass_ = 0;  // ns; the watcher's, read after it joins
  std::thread thread_;
};

}  // namespace conccl
