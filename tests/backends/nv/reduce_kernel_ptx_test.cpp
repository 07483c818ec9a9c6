// tests/backends/nv/reduce_kernel_ptx_test.cpp - the reduce kernel's PTX generator
// and launch_reduce's checks (src/backends/nv/reduce_kernel.cpp), on any
// machine: no GPU, no CUDA toolkit, no libcuda needed.
//
// The PTX can only be compiled by a CUDA driver (reduce_kernel_hw_test.cpp
// does that on a GPU), so here every module is checked for the mistakes a
// generator makes: a missing entry or parameter, unbalanced braces, a
// register used but never declared, a branch to a label that is not there,
// an instruction without its ';'. Plus the semantics the header asks for
// that show in the text (no fused or flush-to-zero float ops, NaN-aware
// min/max, no bf16 instructions).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/nv/ptx_text.hpp"
#include "backends/nv/reduce_kernel.hpp"

namespace conccl::nv {
namespace {

constexpr DataType kTypes[] = {DataType::f32, DataType::bf16, DataType::f16,
                               DataType::i32, DataType::i64,  DataType::u8};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg};

bool is_float(DataType t) { return t == DataType::f32 || t == DataType::bf16 || t == DataType::f16; }

TEST(NvReducePtx, EveryModuleIsWellFormed) {
  std::set<std::string> entries;
  const std::set<std::string> special = {"%ctaid.x", "%ntid.x", "%tid.x", "%nctaid.x"};
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      const std::string name = reduce_entry_name(t, op);
      SCOPED_TRACE(name);
      const std::string ptx = reduce_ptx(t, op);
      ASSERT_FALSE(ptx.empty());
      ASSERT_FALSE(name.empty());
      EXPECT_TRUE(entries.insert(name).second) << "entry names must differ";
      EXPECT_EQ(name.rfind("conccl_reduce_", 0), 0u);

      // The header the library asks the JIT for.
      EXPECT_NE(ptx.find(".version 7.0\n"), std::string::npos);
      EXPECT_NE(ptx.find(".target sm_70\n"), std::string::npos);
      EXPECT_NE(ptx.find(".address_size 64\n"), std::string::npos);
      // One entry, with the parameters launch_reduce passes, in its order.
      const std::string entry = ".visible .entry " + name + "(";
      ASSERT_NE(ptx.find(entry), std::string::npos);
      EXPECT_EQ(ptx.find(entry), ptx.rfind(entry));
      size_t at = ptx.find(entry);
      for (const std::string& param :
           {".param .align 8 .b8 " + name + "_in[512],", ".param .u32 " + name + "_n,",
            ".param .u64 " + name + "_out,", ".param .u64 " + name + "_count,",
            ".param .u64 " + name + "_head,", ".param .u64 " + name + "_nvec\n"}) {
        const size_t p = ptx.find(param, at);
        EXPECT_NE(p, std::string::npos) << "parameter missing or out of order: " << param;
        if (p != std::string::npos) at = p;
      }

      const int instructions = expect_well_formed_ptx(ptx, special);
      EXPECT_GT(instructions, 100);
      EXPECT_NE(ptx.find("\tret;\n"), std::string::npos);

      // Semantics that show in the text.
      EXPECT_EQ(ptx.find(".ftz"), std::string::npos) << "subnormals must survive as on the host";
      EXPECT_EQ(ptx.find("fma"), std::string::npos);
      EXPECT_EQ(ptx.find(".bf16"), std::string::npos) << "no bf16 instructions (sm_80+ only)";
      EXPECT_NE(ptx.find("ld.global.v"), std::string::npos) << "a 16-byte vector path";
      // Which instructions each operator needs, as searched-for text (empty: none).
      std::vector<std::string> needed;
      if (is_float(t)) {
        EXPECT_EQ(ptx.find("max.f32"), std::string::npos) << "max.f32 drops NaN";
        EXPECT_EQ(ptx.find("min.f32"), std::string::npos) << "min.f32 drops NaN";
        if (op == ReduceOp::max || op == ReduceOp::min) needed.push_back("setp.num.f32");
        if (op == ReduceOp::sum || op == ReduceOp::avg) needed.push_back("add.rn.f32");
        if (op == ReduceOp::prod) needed.push_back("mul.rn.f32");
        if (op == ReduceOp::avg) needed.push_back("div.rn.f32");
      } else if (op == ReduceOp::avg) {
        needed.push_back(t == DataType::u8 ? "div.u32" : t == DataType::i32 ? "div.s32" : "div.s64");
      }
      if (t == DataType::bf16) needed.push_back("add.u32 %t1, %t1, 32767;");  // round to nearest even
      if (t == DataType::f16) needed.push_back("cvt.rn.f16.f32");
      for (const std::string& n : needed) EXPECT_NE(ptx.find(n), std::string::npos) << "no " << n;
      // All 64 input slots are read from the parameter array.
      EXPECT_NE(ptx.find("[" + name + "_in+504]"), std::string::npos);
    }
  }
  EXPECT_EQ(entries.size(), 30u);
}

TEST(NvReducePtx, UnknownTypeOrOperatorHasNoModule) {
  EXPECT_EQ(reduce_ptx(static_cast<DataType>(3), ReduceOp::sum), "");
  EXPECT_EQ(reduce_ptx(DataType::f32, static_cast<ReduceOp>(9)), "");
  EXPECT_EQ(reduce_entry_name(static_cast<DataType>(0), ReduceOp::sum), "");
}

DeviceReduceStep step_of(DataType t, ReduceOp op, size_t count, std::vector<uint64_t> inputs, uint64_t out) {
  DeviceReduceStep s;
  s.dtype = t;
  s.op = op;
  s.count = count;
  s.inputs = std::move(inputs);
  s.out = out;
  return s;
}

// Argument checks come before libcuda is needed, so they hold everywhere.
TEST(NvReduceLaunch, RejectsBadSteps) {
  ReduceLaunchInfo info{7, 7};
  Status s = launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 16, {}, 0x10000), &info);
  EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
  EXPECT_EQ(info.blocks, 0);

  std::vector<uint64_t> many(kMaxReduceInputs + 1, 0x100000);
  s = launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 16, many, 0x10000));
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("64"), std::string::npos) << s.message();

  s = launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 16, {0x100000, 0}, 0x10000));
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("input 1"), std::string::npos) << s.message();

  s = launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 16, {0x100000}, 0));
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("out"), std::string::npos) << s.message();

  s = launch_reduce(nullptr, step_of(DataType::i32, ReduceOp::sum, 16, {0x100002}, 0x10000));
  EXPECT_EQ(s.code(), Code::invalid_argument) << "an int32 at an odd address";
  EXPECT_NE(s.message().find("aligned"), std::string::npos) << s.message();

  s = launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 16, {0x100000, 0x100010}, 0x100000 + 8));
  EXPECT_EQ(s.code(), Code::invalid_argument) << "out overlaps an input partly";
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s.message();

  s = launch_reduce(nullptr, step_of(static_cast<DataType>(3), ReduceOp::sum, 16, {0x100000}, 0x10000));
  EXPECT_EQ(s.code(), Code::invalid_argument);
  s = launch_reduce(nullptr, step_of(DataType::f32, static_cast<ReduceOp>(7), 16, {0x100000}, 0x10000));
  EXPECT_EQ(s.code(), Code::invalid_argument);

  // Nothing to do is fine, and launches nothing.
  info = ReduceLaunchInfo{7, 7};
  EXPECT_TRUE(launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 0, {0x100000}, 0x10000), &info).ok());
  EXPECT_EQ(info.blocks, 0);
}

TEST(NvReduceLaunch, UnavailableWithoutLibcuda) {
  if (void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(l);
    GTEST_SKIP() << "libcuda.so.1 loads here (reduce_kernel_hw_test.cpp covers it)";
  }
  ReduceLaunchInfo info;
  // In place, 1000 floats of two inputs: a valid step, so only libcuda is missing.
  Status s = launch_reduce(nullptr, step_of(DataType::f32, ReduceOp::sum, 1000, {0x100000, 0x200000}, 0x100000),
                           &info);
  EXPECT_EQ(s.code(), Code::unavailable) << s.to_string();
  EXPECT_NE(s.message().find("libcuda"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reduce_on_host"), std::string::npos) << "names the fallback: " << s.message();
  EXPECT_EQ(info.blocks, 0);
}

}  // namespace
}  // namespace conccl::nv
