// tests/cli/json_check.cpp - see json_check.hpp.
#include "json_check.hpp"

#include <cctype>
#include <cstring>

namespace probe_test {
namespace {

class Checker {
 public:
  explicit Checker(std::string_view t) : t_(t) {}

  bool document() {
    ws();
    if (!value(0)) return false;
    ws();
    return i_ == t_.size();
  }

 private:
  bool value(int depth) {
    if (depth > 64 || i_ >= t_.size()) return false;
    switch (t_[i_]) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return string();
      case 't': return word("true");
      case 'f': return word("false");
      case 'n': return word("null");
      default: return number();
    }
  }
  // An object or an array: the opening bracket, items separated by commas
  // (item() reads one, white space around it skipped), `close`.
  template <typename Item>
  bool items(char close, Item item) {
    ++i_;
    ws();
    if (eat(close)) return true;
    do {
      ws();
      if (!item()) return false;
      ws();
    } while (eat(','));
    return eat(close);
  }
  bool object(int depth) {
    return items('}', [&] {
      if (i_ >= t_.size() || t_[i_] != '"' || !string()) return false;
      ws();
      if (!eat(':')) return false;
      ws();
      return value(depth + 1);
    });
  }
  bool array(int depth) {
    return items(']', [&] { return value(depth + 1); });
  }
  bool string() {
    ++i_;
    while (i_ < t_.size()) {
      const unsigned char c = static_cast<unsigned char>(t_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (i_ >= t_.size()) return false;
      const char e = t_[i_++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k)
          if (i_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[i_++]))) return false;
      } else if (!std::strchr("\"\\/bfnrt", e)) {
        return false;
      }
    }
    return false;
  }
  bool number() {
    eat('-');
    if (eat('0')) {
    } else if (!digits()) {
      return false;
    }
    if (eat('.') && !digits()) return false;
    if (eat('e') || eat('E')) {
      if (!eat('+')) eat('-');
      if (!digits()) return false;
    }
    return true;
  }
  bool digits() {
    const size_t b = i_;
    while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    return i_ > b;
  }
  bool word(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool eat(char c) {
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void ws() {
    while (i_ < t_.size() && std::strchr(" \t\r\n", t_[i_]) && t_[i_]) ++i_;
  }

  std::string_view t_;
  size_t i_ = 0;
};

}  // namespace

bool is_valid_json(std::string_view text) { return Checker(text).document(); }

}  // namespace probe_test
