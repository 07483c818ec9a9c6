// tests/backends/nv/ptx_text.hpp - reading PTX text the library generates
// (the reduce kernel, the replay tick), for tests that cannot compile it: no
// CUDA toolkit is needed to build ConCCL, and only a driver's JIT compiles
// PTX (the hardware tests do that).
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace conccl::nv {

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) {
    const size_t b = l.find_first_not_of(" \t");
    const size_t e = l.find_last_not_of(" \t\r");
    out.push_back(b == std::string::npos ? "" : l.substr(b, e - b + 1));
  }
  return out;
}

// %name or %name<digits>: the register's base name and, for an array
// element, its index (-1 when the name has no digits at the end).
inline std::pair<std::string, int> split_reg(const std::string& r) {
  size_t d = r.size();
  while (d > 1 && std::isdigit(static_cast<unsigned char>(r[d - 1]))) --d;
  if (d == r.size()) return {r, -1};
  return {r.substr(0, d), std::stoi(r.substr(d))};
}

// Declared registers: %name -> array size (0 for a plain register).
inline std::map<std::string, int> declared_regs(const std::vector<std::string>& lines) {
  std::map<std::string, int> regs;
  for (const std::string& l : lines) {
    if (l.rfind(".reg ", 0) != 0) continue;
    const size_t p = l.find('%');
    std::string name = l.substr(p, l.find(';') - p);
    if (const size_t lt = name.find('<'); lt != std::string::npos) {
      regs[name.substr(0, lt)] = std::stoi(name.substr(lt + 1));
    } else {
      regs[name] = 0;
    }
  }
  return regs;
}


// The checks every module gets (the mistakes a generator makes): braces and
// parentheses balance, every instruction ends in ';', every %register is
// declared (and inside its array), every branch target is a label, labels
// are unique. `special`: registers PTX declares itself. Returns the number
// of instructions in the body.
inline int expect_well_formed_ptx(const std::string& ptx, const std::set<std::string>& special = {}) {
  int braces = 0, parens = 0;
  for (char c : ptx) {
    braces += c == '{' ? 1 : c == '}' ? -1 : 0;
    parens += c == '(' ? 1 : c == ')' ? -1 : 0;
    EXPECT_GE(braces, 0);
    EXPECT_GE(parens, 0);
  }
  EXPECT_EQ(braces, 0);
  EXPECT_EQ(parens, 0);
  const std::vector<std::string> lines = lines_of(ptx);
  const std::map<std::string, int> regs = declared_regs(lines);
  std::set<std::string> labels, targets;
  bool in_body = false;
  int instructions = 0;
  for (const std::string& l : lines) {
    if (l == "{") {
      in_body = true;
      continue;
    }
    if (!in_body || l.empty() || l == "}" || l.rfind("//", 0) == 0 || l.rfind(".reg ", 0) == 0) continue;
    if (l.back() == ':') {
      EXPECT_TRUE(labels.insert(l.substr(0, l.size() - 1)).second) << "label defined twice: " << l;
      continue;
    }
    ++instructions;
    EXPECT_EQ(l.back(), ';') << "instruction without ';': " << l;
    if (const size_t b = l.find("bra"); b != std::string::npos && l.find(' ', b) != std::string::npos) {
      const size_t s = l.find(' ', b) + 1;
      targets.insert(l.substr(s, l.find(';', s) - s));
    }
    for (size_t p = l.find('%'); p != std::string::npos; p = l.find('%', p + 1)) {
      size_t e = p + 1;
      while (e < l.size() && (std::isalnum(static_cast<unsigned char>(l[e])) || l[e] == '_' || l[e] == '.')) ++e;
      std::string reg = l.substr(p, e - p);
      if (special.count(reg)) continue;
      if (!reg.empty() && reg.back() == '.') reg.pop_back();
      if (regs.count(reg) && regs.at(reg) == 0) continue;
      const auto [base, index] = split_reg(reg);
      EXPECT_TRUE(regs.count(base) && index >= 0 && index < regs.at(base)) << "register " << reg
                                                                           << " not declared, in: " << l;
    }
  }
  for (const std::string& target : targets) EXPECT_TRUE(labels.count(target)) << "no label " << target;
  return instructions;
}

}  // namespace conccl::nv
