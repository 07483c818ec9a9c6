// tools/sdma-probe/sweep_signal.hpp - SIGINT/SIGTERM during a sweep: the
// handler only records the signal; the sweep checks it between iterations,
// abandons the size it was timing, writes what it has and exits 128 + signal.
#pragma once

namespace probe {

// Installs the handlers (SIGINT, SIGTERM). A second signal of the same kind
// ends the process at once (the handler restores the default action).
void install_sweep_signals();
// The signal received since install_sweep_signals(), or 0.
int sweep_signal();
// "SIGINT", "SIGTERM" (or "signal N").
const char* sweep_signal_name(int sig);

}  // namespace probe
