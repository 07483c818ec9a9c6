// src/util/sha256.hpp - SHA-256 (FIPS 180-4, section 6.2) and HMAC-SHA-256
// (RFC 2104, FIPS 198-1), for the bootstrap: socket names that reveal
// nothing of the unique id, and the proof that a joining process knows it.
// Small and unoptimised: it hashes a few hundred bytes per connection.
// Checked against FIPS 180-4's examples and RFC 4231's test cases
// (tests/multiproc/sha256_test.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace conccl::util {

using Digest256 = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256() = default;

  Sha256& update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bits_ += static_cast<uint64_t>(n) * 8;
    while (n > 0) {
      const size_t take = std::min(n, sizeof block_ - used_);
      std::memcpy(block_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == sizeof block_) {
        compress();
        used_ = 0;
      }
    }
    return *this;
  }
  Sha256& update(std::string_view s) { return update(s.data(), s.size()); }

  // The digest (section 5.1.1's padding: a 1 bit, zeros, the 64-bit
  // big-endian length). The object is spent afterwards.
  Digest256 finish() {
    const uint64_t bits = bits_;
    const uint8_t one = 0x80, zero = 0;
    update(&one, 1);
    while (used_ != 56) update(&zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(len, 8);
    Digest256 out;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) out[static_cast<size_t>(4 * i + j)] = static_cast<uint8_t>(h_[i] >> (24 - 8 * j));
    return out;
  }

  static Digest256 of(const void* data, size_t n) { return Sha256().update(data, n).finish(); }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  // Section 6.2.2, one 512-bit block.
  void compress() {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int t = 0; t < 16; ++t)
      w[t] = uint32_t(block_[4 * t]) << 24 | uint32_t(block_[4 * t + 1]) << 16 | uint32_t(block_[4 * t + 2]) << 8 |
             uint32_t(block_[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[t] + w[t];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  // Section 5.3.3, the initial hash value.
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

// HMAC-SHA-256 (RFC 2104): H((K ^ opad) || H((K ^ ipad) || message)), the
// key hashed first when longer than the 64-byte block.
inline Digest256 hmac_sha256(const void* key, size_t key_len, const void* msg, size_t msg_len) {
  uint8_t k[64] = {};
  if (key_len > sizeof k) {
    const Digest256 kd = Sha256::of(key, key_len);
    std::memcpy(k, kd.data(), kd.size());
  } else if (key_len > 0) {
    std::memcpy(k, key, key_len);
  }
  uint8_t pad[64];
  for (size_t i = 0; i < 64; ++i) pad[i] = static_cast<uint8_t>(k[i] ^ 0x36);
  const Digest256 inner = Sha256().update(pad, 64).update(msg, msg_len).finish();
  for (size_t i = 0; i < 64; ++i) pad[i] = static_cast<uint8_t>(k[i] ^ 0x5c);
  return Sha256().update(pad, 64).update(inner.data(), inner.size()).finish();
}

// Compares two digests in time independent of where they differ, so that a
// peer guessing a proof learns nothing from how long the refusal took.
inline bool digests_equal(const Digest256& a, const Digest256& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = static_cast<uint8_t>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

}  // namespace conccl::util
