// tools/sdma-probe/text_input.cpp - see text_input.hpp.
#include "text_input.hpp"

namespace probe {

bool LineReader::next(std::string* line, bool* too_long) {
  line->clear();
  *too_long = false;
  int c;
  bool any = false;
  while ((c = std::fgetc(f_)) != EOF) {
    any = true;
    if (c == '\n') break;
    if (line->size() < kMaxLineBytes) {
      line->push_back(static_cast<char>(c));
    } else {
      *too_long = true;  // keep reading to the newline, store nothing more
    }
  }
  if (!any) return false;
  if (*too_long) line->clear();
  ++line_no_;
  return true;
}

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  return out;
}

void ErrorLines::report(size_t line_no, std::string_view message) {
  ++count_;
  if (count_ > kMaxErrorLines) return;
  if (line_no)
    std::fprintf(err_, "%s:%zu: %s\n", printable(name_).c_str(), line_no, printable(message, 400).c_str());
  else
    std::fprintf(err_, "%s: %s\n", printable(name_).c_str(), printable(message, 400).c_str());
}

void ErrorLines::finish() {
  if (finished_) return;
  finished_ = true;
  if (count_ > kMaxErrorLines)
    std::fprintf(err_, "%s: %d more error%s not shown\n", printable(name_).c_str(), count_ - kMaxErrorLines,
                 count_ - kMaxErrorLines == 1 ? "" : "s");
}

}  // namespace probe
