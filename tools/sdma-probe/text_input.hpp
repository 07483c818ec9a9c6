// tools/sdma-probe/text_input.hpp - reading asm/dis text inputs line by line,
// in bounded memory, and reporting their errors without flooding or echoing
// binary: a line longer than kMaxLineBytes is skipped to its newline and
// reported; each input prints at most kMaxErrorLines error lines, then a count;
// error text is escaped to printable ASCII.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace probe {

inline constexpr size_t kMaxLineBytes = 64 * 1024;
inline constexpr int kMaxErrorLines = 20;

class LineReader {
 public:
  explicit LineReader(FILE* f) : f_(f) {}
  // The next line (without '\n'); false at the end of the input. *too_long:
  // the line exceeded kMaxLineBytes, was skipped, and *line is empty.
  bool next(std::string* line, bool* too_long);
  size_t line_no() const { return line_no_; }

 private:
  FILE* f_;
  size_t line_no_ = 0;
};

// Bytes outside printable ASCII as \xNN, cut to `max` bytes with "...".
std::string printable(std::string_view s, size_t max = 160);

class ErrorLines {
 public:
  ErrorLines(FILE* err, std::string name) : err_(err), name_(std::move(name)) {}
  ~ErrorLines() { finish(); }
  // "NAME:LINE: message" (line 0: "NAME: message"), the first kMaxErrorLines only.
  void report(size_t line_no, std::string_view message);
  // Prints how many were left out, once.
  void finish();
  int count() const { return count_; }

 private:
  FILE* err_;
  std::string name_;
  int count_ = 0;
  bool finished_ = false;
};

}  // namespace probe
