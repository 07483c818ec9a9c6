// tests/multiproc/sha256_test.cpp - the bootstrap's SHA-256 and HMAC-SHA-256
// (src/util/sha256.hpp) against published vectors: FIPS 180-4's examples
// (as listed in NIST's "Example Algorithms" for SHA-256) and RFC 4231's
// HMAC-SHA-256 test cases 1, 2 and 6.
#include <gtest/gtest.h>

#include <string>

#include "util/sha256.hpp"

namespace conccl::util {
namespace {

std::string hex_of(const Digest256& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string sha(const std::string& m) { return hex_of(Sha256::of(m.data(), m.size())); }

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 448 bits: the padding needs a second block.
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopq"
                "rstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Fed in pieces of every size from 1 to 130 bytes, the digest is the one of
// the whole (the block buffer's edges).
TEST(Sha256, PiecesGiveTheSameDigest) {
  std::string m;
  for (int i = 0; i < 1000; ++i) m += static_cast<char>(i * 7 + 3);
  const Digest256 whole = Sha256::of(m.data(), m.size());
  for (size_t piece = 1; piece <= 130; ++piece) {
    Sha256 s;
    for (size_t at = 0; at < m.size(); at += piece) s.update(m.data() + at, std::min(piece, m.size() - at));
    EXPECT_EQ(hex_of(s.finish()), hex_of(whole)) << "pieces of " << piece;
  }
}

TEST(HmacSha256, Rfc4231) {
  const std::string k1(20, '\x0b'), m1 = "Hi There";
  EXPECT_EQ(hex_of(hmac_sha256(k1.data(), k1.size(), m1.data(), m1.size())),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const std::string k2 = "Jefe", m2 = "what do ya want for nothing?";
  EXPECT_EQ(hex_of(hmac_sha256(k2.data(), k2.size(), m2.data(), m2.size())),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block is hashed first.
  const std::string k6(131, '\xaa'), m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  EXPECT_EQ(hex_of(hmac_sha256(k6.data(), k6.size(), m6.data(), m6.size())),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, DigestsEqual) {
  const Digest256 a = Sha256::of("a", 1);
  Digest256 b = a;
  EXPECT_TRUE(digests_equal(a, b));
  for (size_t i = 0; i < b.size(); ++i) {
    b = a;
    b[i] ^= 1;
    EXPECT_FALSE(digests_equal(a, b)) << "byte " << i;
  }
}

}  // namespace
}  // namespace conccl::util
