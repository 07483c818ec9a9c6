// tools/sdma-probe/sweep_signal.hpp - SIGINT/SIGTERM during a sweep: the
// handler only records the signal; the sweep checks it between iterations,
// abandons the size it was timing, writes what it has and exits 128 + signal.
#pragma once

namespace probe {

// What a second SIGINT/SIGTERM does once one has been recorded.
enum class SecondSignal {
  kills,    // ends the process at once (the handler restores the default action)
  ignored,  // recorded already: a --procs rank, which may get the terminal's
            // Ctrl-C and its launcher's forwarded one; the launcher ends it
};

// Installs the handlers (SIGINT, SIGTERM) and unblocks both signals (a
// --procs rank starts with them blocked, so that one sent before its
// handlers exist waits for them instead of killing it).
void install_sweep_signals(SecondSignal second = SecondSignal::kills);
// The signal received since install_sweep_signals(), or 0.
int sweep_signal();
// "SIGINT", "SIGTERM" (or "a signal").
const char* sweep_signal_name(int sig);

}  // namespace probe
