// tests/docs/architecture_test.cpp - docs/architecture.md names real things:
// every backquoted path exists, and every backquoted symbol (a name with a
// call, a scope or a CamelCase type) appears in the sources. A rename that
// forgets the page fails here, as the page's old `Recorder`, `RingBackend`
// and `variant_needs()` would have.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every source text a symbol may live in.
const std::string& sources() {
  static const std::string all = [] {
    std::string out;
    for (const char* dir : {"include", "src", "packets", "python", "tools", "cmake"})
      for (const auto& e : fs::recursive_directory_iterator(fs::path(CONCCL_SOURCE_DIR) / dir)) {
        if (!e.is_regular_file()) continue;
        const std::string ext = e.path().extension().string();
        if (ext == ".hpp" || ext == ".cpp" || ext == ".h" || ext == ".py" || ext == ".cmake" || ext == ".sh")
          out += read(e.path()) + "\n";
      }
    return out;
  }();
  return all;
}

// The backquoted spans of the page, outside ``` blocks.
std::vector<std::string> quoted(const std::string& md) {
  std::vector<std::string> out;
  std::istringstream in(md);
  std::string line;
  bool fenced = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    for (size_t at = line.find('`'); at != std::string::npos;) {
      const size_t end = line.find('`', at + 1);
      if (end == std::string::npos) break;
      out.push_back(line.substr(at + 1, end - at - 1));
      at = line.find('`', end + 1);
    }
  }
  return out;
}

// `word` in `text`, not as part of a longer identifier.
bool contains_word(const std::string& text, const std::string& word) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left = at == 0 || !ident(text[at - 1]);
    const bool right = at + word.size() >= text.size() || !ident(text[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

bool looks_like_path(const std::string& q) {
  static const std::regex re(R"(^(include|src|packets|python|tools|tests|cmake|docs|examples)/[A-Za-z0-9_./*-]+$)");
  return std::regex_match(q, re);
}

// The identifiers a span names: `Queue::Reservation` -> Queue, Reservation;
// `variant_missing_cap()` -> variant_missing_cap; `Isa` -> Isa. Plain words
// (`copy`, `sdma`) and call examples with arguments are left to the table
// above them, which the lowerings' own tests hold.
std::vector<std::string> symbols(const std::string& q) {
  static const std::regex call(R"(^([A-Za-z_][A-Za-z0-9_:]*)\(\)$)");
  static const std::regex scoped(R"(^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+$)");
  static const std::regex type(R"(^[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*$|^[A-Z][a-z]+$)");
  std::smatch m;
  std::string name;
  if (std::regex_match(q, m, call)) name = m[1];
  else if (std::regex_match(q, scoped) || std::regex_match(q, type)) name = q;
  else return {};
  std::vector<std::string> out;
  for (size_t at = 0; at <= name.size();) {
    size_t end = name.find("::", at);
    if (end == std::string::npos) end = name.size();
    out.push_back(name.substr(at, end - at));
    at = end + 2;
  }
  return out;
}

TEST(ArchitectureDoc, EveryNamedPathAndSymbolExists) {
  const std::string md = read(fs::path(CONCCL_SOURCE_DIR) / "docs" / "architecture.md");
  ASSERT_FALSE(md.empty());
  int paths = 0, names = 0;
  for (const std::string& q : quoted(md)) {
    if (looks_like_path(q)) {
      ++paths;
      if (q.find('*') != std::string::npos || q.find("NAME") != std::string::npos) continue;  // a pattern
      EXPECT_TRUE(fs::exists(fs::path(CONCCL_SOURCE_DIR) / q)) << "docs/architecture.md names `" << q
                                                                << "`, which is not in the tree";
      continue;
    }
    for (const std::string& s : symbols(q)) {
      ++names;
      EXPECT_TRUE(contains_word(sources(), s))
          << "docs/architecture.md names `" << q << "`: no '" << s << "' in include/, src/, packets/, python/, tools/";
    }
  }
  EXPECT_GT(paths, 20) << "the page's paths were not found: did its form change?";
  EXPECT_GT(names, 20) << "the page's symbols were not found: did its form change?";
}

// The checker itself: what it would have caught.
TEST(ArchitectureDoc, TheCheckerFindsNamesThatDoNotExist) {
  EXPECT_EQ(symbols("variant_needs()"), std::vector<std::string>{"variant_needs"});
  EXPECT_EQ(symbols("Queue::Reservation"), (std::vector<std::string>{"Queue", "Reservation"}));
  EXPECT_EQ(symbols("RingBackend"), std::vector<std::string>{"RingBackend"});
  EXPECT_TRUE(symbols("copy").empty());
  for (const char* gone : {"variant_needs", "Recorder", "RingBackend"})
    EXPECT_FALSE(contains_word(sources(), gone)) << gone;
  EXPECT_TRUE(looks_like_path("src/queue/sdma_queue.hpp"));
  EXPECT_FALSE(looks_like_path("copy(dst, src, n)"));
}

}  // namespace
