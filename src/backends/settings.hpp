// src/backends/settings.hpp - a backend's extras, one pattern for all of them:
// DeviceOptions::settings (conccl_device_options.settings in C, settings= in
// Python) is "key=value" words separated by spaces, e.g. "interrupt_waits=0
// gpus=0,0". Each backend's opener takes the keys it knows into its own
// Options; finish() refuses what is left, naming the keys it knows, so a
// misspelt key is an error rather than a silent default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "conccl/status.hpp"

namespace conccl {

class Settings {
 public:
  // Errors: a word without '=', an empty key or a key given twice.
  static Result<Settings> parse(const std::string& text, const std::string& backend);

  bool has(const char* key) const { return values_.count(key) != 0; }
  // Each take leaves *out as it is when the key is absent, and records the
  // key as known either way (for finish()'s message).
  Status take(const char* key, std::string* out);
  Status take(const char* key, bool* out);                          // 0/1, true/false, on/off
  Status take(const char* key, int64_t lo, int64_t hi, int* out);   // decimal, in [lo, hi]
  Status take(const char* key, uint64_t* out);                      // decimal or 0x..; K/M/G suffixes
  Status take(const char* key, uint32_t* out);
  Status take(const char* key, std::vector<int>* out);              // "0,1,1"
  // One of `choices`; *out gets its index.
  Status take_choice(const char* key, const std::vector<std::string>& choices, int* out);
  // Every key given was taken; otherwise the error names it and the known keys.
  Status finish() const;

 private:
  // Records `key` as known; its value, or null when it was not given.
  const std::string* claim(const char* key);
  Status bad(const char* key, const std::string& value, const std::string& want) const;
  std::string backend_;
  std::map<std::string, std::string> values_;
  std::set<std::string> taken_;     // every key asked for
  std::vector<std::string> known_;  // the same, in the order asked (for messages)
};

}  // namespace conccl
