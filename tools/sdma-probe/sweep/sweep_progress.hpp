// tools/sdma-probe/sweep_progress.hpp - the sweep's progress bar on stderr,
// only when stderr is a terminal, erased before each row is printed so that
// it never ends up inside the table or in captured output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace probe {

class Progress {
 public:
  explicit Progress(FILE* err);  // active only when err is a terminal
  bool active() const { return tty_; }
  // "[#####     ] 3/12  64 KiB": size `size` is running, `done` of `total` finished.
  void show(size_t done, size_t total, uint64_t size);
  // Erases the bar (carriage return + erase line) if one is shown.
  void clear();

 private:
  FILE* err_;
  bool tty_;
  bool shown_ = false;
};

}  // namespace probe
