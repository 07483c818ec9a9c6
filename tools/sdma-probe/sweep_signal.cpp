// tools/sdma-probe/sweep_signal.cpp - see sweep_signal.hpp.
#include "sweep_signal.hpp"

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

}  // namespace

void install_sweep_signals() {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
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
