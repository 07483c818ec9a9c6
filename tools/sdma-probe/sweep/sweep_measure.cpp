// tools/sdma-probe/sweep_measure.cpp - see sweep_measure.hpp.
#include "sweep/sweep_measure.hpp"

#include <algorithm>
#include <cstring>

#include "conccl/bootstrap.hpp"
#include "sweep/sweep_signal.hpp"

namespace probe {

int RankSync::stop_signal() const { return me_ < 0 ? sweep_signal() : agreed_signal_; }

conccl::Result<std::vector<std::string>> RankSync::exchange(const std::string& what, const std::string& mine) {
  const std::string sent = std::string(1, static_cast<char>(sweep_signal())) + mine;
  conccl::Result<std::vector<conccl::Bootstrap::Message>> all =
      comm_->bootstrap()->exchange(what, sent, {}, conccl::Deadline::after_ms(deadline_ms_));
  if (!all.ok()) return all.status();
  std::vector<std::string> out;
  for (const conccl::Bootstrap::Message& m : *all) {
    if (m.data.empty())
      return conccl::error(conccl::Code::internal, "a rank's '" + what + "' message is empty (please report)");
    if (m.data[0] && !agreed_signal_) agreed_signal_ = static_cast<unsigned char>(m.data[0]);
    out.push_back(m.data.substr(1));
  }
  return out;
}

conccl::Status RankSync::barrier(const std::string& what) {
  if (me_ < 0) return conccl::Status();
  return exchange(what, "").status();
}

namespace {
bool clocks_raised = false;  // the first warm-up of this process has run (warm_up)
}  // namespace

conccl::Status warm_up(RankSync& sync, int64_t warmup, bool emulated, const std::string& at,
                       const std::function<conccl::Status()>& call) {
  const int64_t min_ms = emulated ? 0 : clocks_raised ? 100 : 1500;
  clocks_raised = clocks_raised || !emulated;
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(min_ms);
  uint64_t warm = 0;
  auto more_warmup = [&]() -> conccl::Result<bool> {
    bool more = (warm < static_cast<uint64_t>(warmup) || std::chrono::steady_clock::now() < warm_until) &&
                !sync.stop_signal();
    if (sync.me() < 0) return more;
    conccl::Result<std::vector<std::string>> all = sync.exchange("warm-up", more ? "1" : "0");
    if (!all.ok()) return all.status();
    for (const std::string& m : *all) more |= m == "1";
    return more && !sync.stop_signal();
  };
  while (true) {
    conccl::Result<bool> more = more_warmup();
    if (!more.ok()) return more.status().prefix("warm-up at " + at);
    if (!*more) break;
    CONCCL_RETURN_IF_ERROR(call().prefix("warm-up at " + at));
    ++warm;
  }
  return conccl::Status();
}

namespace {

// Bootstrap messages this rank sent and received between two snapshots.
double messages_between(const conccl::CommStats& before, const conccl::CommStats& after) {
  return static_cast<double>(after.bootstrap_messages_sent - before.bootstrap_messages_sent +
                             after.bootstrap_messages_received - before.bootstrap_messages_received);
}

}  // namespace

conccl::Status time_calls(RankSync& sync, uint64_t n_iters, uint64_t agree_every, const char* noun,
                          const std::string& at, const TimedCall& call, Measured* m) {
  const int me = sync.me();
  std::vector<double> times;
  double messages = 0;
  for (uint64_t it = 0; it < n_iters && !sync.stop_signal(); ++it) {
    if (me >= 0 && it % agree_every == 0) {  // the ranks agree to call (untimed)
      conccl::Result<std::vector<std::string>> go = sync.exchange("launch", "");
      if (!go.ok()) return go.status().prefix(std::string("before a timed ") + noun + " at " + at);
      if (sync.stop_signal()) break;
    }
    const conccl::CommStats before = me >= 0 ? sync.comm().stats() : conccl::CommStats{};
    std::chrono::steady_clock::time_point t0;
    conccl::Status st = call(&t0);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    CONCCL_RETURN_IF_ERROR(st.prefix(at));  // a call may still run: the buffers go with the device
    times.push_back(us);
    if (me >= 0) messages += messages_between(before, sync.comm().stats());
  }
  if (sync.stop_signal()) return conccl::Status();  // abandoned
  m->time = time_stats(times);
  if (me >= 0 && !times.empty()) m->messages_per_call = messages / static_cast<double>(times.size());
  return conccl::Status();
}

conccl::Status combine_ranks(RankSync& sync, const std::string& at, Measured* m) {
  if (sync.me() < 0) return conccl::Status();
  struct Mine {
    uint64_t wrong;
    TimeStats time;
    double messages_per_call;
  } mine{m->wrong, m->time, m->messages_per_call};
  conccl::Result<std::vector<std::string>> all =
      sync.exchange("row", std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
  if (!all.ok()) return all.status().prefix("collecting the ranks' results at " + at);
  m->wrong = 0;
  for (const std::string& msg : *all) {
    Mine t{};
    if (msg.size() == sizeof t) std::memcpy(&t, msg.data(), sizeof t);
    m->wrong += t.wrong;
    if (t.time.mean > m->time.mean) m->time = t.time;
    m->messages_per_call = std::max(m->messages_per_call, t.messages_per_call);
  }
  return conccl::Status();
}

}  // namespace probe
