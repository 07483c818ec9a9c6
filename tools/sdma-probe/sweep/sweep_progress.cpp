// tools/sdma-probe/sweep_progress.cpp - see sweep_progress.hpp.
#include "sweep/sweep_progress.hpp"

#include <unistd.h>

#include "cli.hpp"

namespace probe {

Progress::Progress(FILE* err) : err_(err), tty_(err && isatty(fileno(err))) {}

void Progress::show(size_t done, size_t total, uint64_t size) {
  if (!tty_) return;
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(err_, "\r\033[K[%.*s%*s] %zu/%zu  %s", filled, "##############################", width - filled, "",
               done, total, format_size(size).c_str());
  std::fflush(err_);
  shown_ = true;
}

void Progress::clear() {
  if (!tty_ || !shown_) return;
  std::fprintf(err_, "\r\033[K");
  std::fflush(err_);
  shown_ = false;
}

}  // namespace probe
