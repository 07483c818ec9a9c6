// tools/sdma-probe/sweep_signal.cpp - see sweep_signal.hpp.
#include "sweep/sweep_signal.hpp"

#include <signal.h>

#include <atomic>

namespace probe {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler may only touch a lock-free atomic");

extern "C" void on_signal(int sig) {
  g_signal.store(sig, std::memory_order_relaxed);
  signal(sig, SIG_DFL);  // async-signal-safe; a second Ctrl-C kills
}

extern "C" void on_signal_once(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);  // the first one counts
}

}  // namespace

void install_sweep_signals(SecondSignal second) {
  struct sigaction sa = {};
  sa.sa_handler = second == SecondSignal::kills ? on_signal : on_signal_once;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  sigprocmask(SIG_UNBLOCK, &both, nullptr);
}

int sweep_signal() { return g_signal.load(std::memory_order_relaxed); }

const char* sweep_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace probe
