// src/backends/settings.cpp - parsing DeviceOptions::settings (settings.hpp).
#include "backends/settings.hpp"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace conccl {

Result<Settings> Settings::parse(const std::string& text, const std::string& backend) {
  Settings s;
  s.backend_ = backend;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0)
      return error(Code::invalid_argument, "backend " + backend + " settings: '" + word +
                                               "' is not key=value (settings are key=value words separated by spaces)");
    const std::string key = word.substr(0, eq);
    if (!s.values_.emplace(key, word.substr(eq + 1)).second)
      return error(Code::invalid_argument, "backend " + backend + " settings: '" + key + "' is given twice");
  }
  return s;
}

Status Settings::bad(const char* key, const std::string& value, const std::string& want) const {
  return error(Code::invalid_argument,
               "backend " + backend_ + " setting " + key + "='" + value + "': give " + want);
}

namespace {
bool parse_u64(const std::string& v, uint64_t* out) {
  if (v.empty() || v[0] == '-' || v[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v.c_str(), &end, 0);
  if (errno || end == v.c_str()) return false;
  uint64_t mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1ull << 10, ++end;
  else if (*end == 'M' || *end == 'm') mul = 1ull << 20, ++end;
  else if (*end == 'G' || *end == 'g') mul = 1ull << 30, ++end;
  if (*end != '\0' || (x != 0 && mul > UINT64_MAX / x)) return false;
  *out = x * mul;
  return true;
}

bool parse_i64(const std::string& v, int64_t* out) {
  if (v.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno || end == v.c_str() || *end != '\0') return false;
  *out = x;
  return true;
}
}  // namespace

const std::string* Settings::claim(const char* key) {
  if (taken_.insert(key).second) known_.push_back(key);
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

Status Settings::take(const char* key, std::string* out) {
  if (const std::string* v = claim(key)) *out = *v;
  return Status();
}

Status Settings::take(const char* key, bool* out) {
  const std::string* v = claim(key);
  if (!v) return Status();
  if (*v == "1" || *v == "true" || *v == "on") *out = true;
  else if (*v == "0" || *v == "false" || *v == "off") *out = false;
  else return bad(key, *v, "0 or 1");
  return Status();
}

Status Settings::take(const char* key, int64_t lo, int64_t hi, int* out) {
  const std::string* v = claim(key);
  if (!v) return Status();
  int64_t x = 0;
  if (!parse_i64(*v, &x) || x < lo || x > hi)
    return bad(key, *v, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  *out = static_cast<int>(x);
  return Status();
}

Status Settings::take(const char* key, uint64_t* out) {
  const std::string* v = claim(key);
  if (v && !parse_u64(*v, out)) return bad(key, *v, "a non-negative integer (decimal or 0x..., K/M/G suffixes)");
  return Status();
}

Status Settings::take(const char* key, uint32_t* out) {
  const std::string* v = claim(key);
  if (!v) return Status();
  uint64_t x = 0;
  if (!parse_u64(*v, &x)) return bad(key, *v, "a non-negative integer (decimal or 0x..., K/M/G suffixes)");
  if (x > UINT32_MAX) return bad(key, *v, "an integer below 2^32");
  *out = static_cast<uint32_t>(x);
  return Status();
}

Status Settings::take(const char* key, std::vector<int>* out) {
  const std::string* v = claim(key);
  if (!v) return Status();
  std::vector<int> list;
  std::istringstream in(*v);
  std::string item;
  while (std::getline(in, item, ',')) {
    int64_t x = 0;
    if (!parse_i64(item, &x) || x < 0 || x > 1 << 20) return bad(key, *v, "a list of indices like 0,1,1");
    list.push_back(static_cast<int>(x));
  }
  if (list.empty()) return bad(key, *v, "a list of indices like 0,1,1");
  *out = std::move(list);
  return Status();
}

Status Settings::take_choice(const char* key, const std::vector<std::string>& choices, int* out) {
  const std::string* v = claim(key);
  if (!v) return Status();
  std::string names;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (*v == choices[i]) {
      *out = static_cast<int>(i);
      return Status();
    }
    names += (i ? ", " : "") + choices[i];
  }
  return bad(key, *v, "one of " + names);
}

Status Settings::finish() const {
  for (const auto& [key, value] : values_)
    if (!taken_.count(key)) {
      std::string known;
      for (const std::string& k : known_) known += (known.empty() ? "" : ", ") + k;
      return error(Code::invalid_argument, "backend " + backend_ + " has no setting '" + key + "' (its settings: " +
                                               (known.empty() ? "none" : known) + ")");
    }
  return Status();
}

}  // namespace conccl
