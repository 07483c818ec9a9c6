// src/collectives/call_trace.cpp - the watching thread of CONCCL_CALL_TRACE
// (call_trace.hpp).
#include "collectives/call_trace.hpp"
#include "util/thread_name.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace conccl {

namespace {
uint64_t load(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_acquire);
}
}  // namespace

CallTrace::CallTrace(std::vector<const uint64_t*> words, std::string path)
    : words_(std::move(words)), path_(std::move(path)), w_(words_.size()),
      target_(kRows * w_, 0), seen_(kRows * w_, -1) {
  thread_ = util::named_thread("conccl-trace", [this] { watch(); });
}

CallTrace::~CallTrace() {
  stop_.store(true, std::memory_order_release);
  thread_.join();
  write();
}

void CallTrace::note_call(uint64_t k, const std::vector<uint64_t>& targets) {
  const size_t row = (k % kRows) * w_;
  for (size_t i = 0; i < w_ && i < targets.size(); ++i) target_[row + i] = targets[i];
  noted_.store(k, std::memory_order_release);
}

// Per word, the next call whose value it has not reached: each pass reads
// every word once and stamps every noted call the value now covers (values
// only grow, so calls are reached in order). A call more than kRows ahead of
// the watcher would overwrite a row not yet stamped; calls in flight are
// far fewer.
void CallTrace::watch() {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto ns = [&] { return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count(); };
  std::vector<uint64_t> next(w_, 1);
  uint64_t cleared = 0;  // rows made ready for their call (only this thread writes seen_)
  int64_t pass_start = ns();
  // One more pass once stopped: what got there before the stop is stamped
  // (the communicator stops the trace after the last call's counters).
  for (bool last = false; !last;) {
    last = stop_.load(std::memory_order_acquire);
    const uint64_t noted = noted_.load(std::memory_order_acquire);
    for (; cleared < noted; ++cleared)
      for (size_t i = 0; i < w_; ++i) seen_[((cleared + 1) % kRows) * w_ + i] = -1;
    for (size_t i = 0; i < w_; ++i) {
      const uint64_t v = load(words_[i]);
      if (next[i] > noted || v < target_[(next[i] % kRows) * w_ + i]) continue;
      const int64_t now = ns();  // just after the read that saw it
      while (next[i] <= noted && v >= target_[(next[i] % kRows) * w_ + i]) {
        seen_[(next[i] % kRows) * w_ + i] = now;
        ++next[i];
      }
    }
    const int64_t end = ns();
    longest_pass_ = std::max(longest_pass_, end - pass_start);
    pass_start = end;
  }
}

void CallTrace::write() const {
  FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) return;  // a trace is best effort: the calls went on regardless
  std::fprintf(f, "# longest pass of the watcher: %lld ns (a stamp is within one pass after its word got there)\n",
               static_cast<long long>(longest_pass_));
  std::fprintf(f, "k");
  for (size_t r = 0; r < w_ / 3; ++r) std::fprintf(f, ",posted_%zu,arrive_%zu,sent_%zu", r, r, r);
  std::fprintf(f, "\n");
  const uint64_t noted = noted_.load(std::memory_order_acquire);
  for (uint64_t k = noted > kRows ? noted - kRows + 1 : 1; k <= noted; ++k) {
    std::fprintf(f, "%llu", static_cast<unsigned long long>(k));
    for (size_t i = 0; i < w_; ++i) {
      const int64_t t = seen_[(k % kRows) * w_ + i];
      if (t < 0) std::fprintf(f, ",");
      else std::fprintf(f, ",%lld", static_cast<long long>(t));
    }
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

}  // namespace conccl
