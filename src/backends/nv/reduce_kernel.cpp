// src/backends/nv/reduce_kernel.cpp - the reduce step as a PTX kernel the
// library writes itself and the CUDA driver compiles at run time.
//
// Why PTX text: the DMA engines cannot add, so every reduction needs one
// elementwise pass on the SMs; carrying that kernel as PTX keeps ConCCL
// buildable without the CUDA toolkit (libcuda is dlopen'd once, through
// cuda_api.cpp's table) and lets the driver JIT it for whatever GPU it finds.
//
// The generator. Every kernel has the same skeleton (reduce_ptx): a
// grid-stride loop over 16-byte vectors, then one over single elements (the
// head before the first 16-byte boundary and the tail after the last full
// vector). Per element the inputs are combined strictly left to right,
// eight loads in flight before their combines, so the pass is not one load
// latency per input. What differs between kernels is data: a row of kTypes
// (how an element is loaded, widened into the accumulator and narrowed back)
// and a row of kAccs (how the accumulator combines for each operator and how
// avg finishes). Templates use $name$ placeholders ($x$ the value, $acc$ the
// accumulator, $w$ a loaded word, $a$ an address ...): PTX itself uses {} and
// %, so those stay free for it.
//
// Semantics (conccl/reduce.hpp) and how the PTX keeps them:
//   - integers wrap: add/mul.lo on the register width; uint8 is held zero-
//     extended in 32 bits, where sums and products are right modulo 256, and
//     avg masks the wrapped sum to 8 bits before the unsigned division;
//   - float ops carry an explicit .rn, which also forbids the JIT from fusing
//     them into an fma (PTX ISA: "mul/add with an explicit rounding modifier
//     are not contracted"); no .ftz, so subnormals stay as on the host;
//   - min/max test NaN explicitly (max.f32/min.f32 return the non-NaN
//     operand): setp.gtu/.ltu is true for "greater/less or unordered", and
//     the accumulator is kept once it is NaN, so the first NaN in input
//     order wins and of equal values the earlier stays, as on the host;
//   - bfloat16 is widened with a shift and narrowed with integer round-to-
//     nearest-even (bf16 PTX instructions need sm_80+ and PTX 7.8: not used);
//     float16 uses cvt.f32.f16 / cvt.rn.f16.f32, which exist on every target.
#include "backends/nv/reduce_kernel.hpp"
#include "backends/nv/cuda_api.hpp"
#include "backends/nv/ptx_module.hpp"


#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace conccl::nv {

namespace {

// ------------------------------------------------------------- PTX tables

// How the accumulator is held and combined. The templates see $acc$ (the
// accumulator lane, read and written) and $x$ (the next input's value).
struct AccRow {
  const char* reg;       // PTX register type of $acc$ and %x
  const char* combine[5];  // by ReduceOp value: sum, prod, max, min, avg (avg sums)
  const char* setup;     // once per thread: what avg's division needs
  const char* avg;       // avg's last step on $acc$
};

// f32 min/max: x replaces acc when x > acc or x is NaN (gtu/ltu: unordered
// counts as true), unless acc is already NaN (setp.num is false then).
#define CONCCL_PTX_FLOAT_PICK(cmp)                     \
  "setp." cmp ".f32 %pc, $x$, $acc$;\n"                \
  "setp.num.f32 %pa, $acc$, $acc$;\n"                  \
  "and.pred %pc, %pc, %pa;\n"                          \
  "selp.f32 $acc$, $x$, $acc$, %pc;\n"

enum AccKind { kAccF32, kAccU32, kAccS32, kAccS64 };
constexpr AccRow kAccs[] = {
    // kAccF32: float32, bfloat16 and float16 all accumulate in float32.
    {".f32",
     {"add.rn.f32 $acc$, $acc$, $x$;\n", "mul.rn.f32 $acc$, $acc$, $x$;\n", CONCCL_PTX_FLOAT_PICK("gtu"),
      CONCCL_PTX_FLOAT_PICK("ltu"), "add.rn.f32 $acc$, $acc$, $x$;\n"},
     "cvt.rn.f32.u32 %fdiv, %nin;\n",  // n <= 64: exact
     "div.rn.f32 $acc$, $acc$, %fdiv;\n"},
    // kAccU32: uint8 zero-extended; the low 8 bits of the 32-bit sum and
    // product are the wrapped 8-bit results.
    {".b32",
     {"add.u32 $acc$, $acc$, $x$;\n", "mul.lo.u32 $acc$, $acc$, $x$;\n", "max.u32 $acc$, $acc$, $x$;\n",
      "min.u32 $acc$, $acc$, $x$;\n", "add.u32 $acc$, $acc$, $x$;\n"},
     "",
     "and.b32 $acc$, $acc$, 255;\ndiv.u32 $acc$, $acc$, %nin;\n"},
    // kAccS32: div.s32 truncates toward zero, as C++ '/'.
    {".b32",
     {"add.s32 $acc$, $acc$, $x$;\n", "mul.lo.s32 $acc$, $acc$, $x$;\n", "max.s32 $acc$, $acc$, $x$;\n",
      "min.s32 $acc$, $acc$, $x$;\n", "add.s32 $acc$, $acc$, $x$;\n"},
     "",
     "div.s32 $acc$, $acc$, %nin;\n"},
    {".b64",
     {"add.s64 $acc$, $acc$, $x$;\n", "mul.lo.s64 $acc$, $acc$, $x$;\n", "max.s64 $acc$, $acc$, $x$;\n",
      "min.s64 $acc$, $acc$, $x$;\n", "add.s64 $acc$, $acc$, $x$;\n"},
     "cvt.u64.u32 %ndiv, %nin;\n",
     "div.s64 $acc$, $acc$, %ndiv;\n"},
};
#undef CONCCL_PTX_FLOAT_PICK

// bfloat16 narrowing of the float32 in $f$ into the low 16 bits of the .b32
// $r$ (upper bits zero): round to nearest even by adding 0x7fff plus the
// kept part's lowest bit, then dropping 16 bits; a NaN keeps its sign and
// top payload with the quiet bit (0x40) set, so it cannot become infinity.
constexpr const char* kNarrowBf16 =
    "mov.b32 %t0, $f$;\n"
    "shr.u32 %t1, %t0, 16;\n"
    "and.b32 %t1, %t1, 1;\n"
    "add.u32 %t1, %t1, 32767;\n"
    "add.u32 %t1, %t0, %t1;\n"
    "shr.u32 %t1, %t1, 16;\n"
    "shr.u32 %t2, %t0, 16;\n"
    "or.b32 %t2, %t2, 64;\n"
    "setp.nan.f32 %pa, $f$, $f$;\n"
    "selp.b32 $r$, %t2, %t1, %pa;\n";

// One element type. Memory is read as words: four .b32 words per 16-byte
// vector, or two .b64 for int64; one word holds lanes_per_word elements.
struct TypeRow {
  DataType dtype;
  const char* tag;  // in the entry name
  unsigned size;    // bytes per element
  AccKind acc;
  bool wide;                 // .b64 words (int64) instead of .b32
  unsigned lanes_per_word;   // elements in one word
  const char* load1;         // one element at $a$ into the word $w$
  const char* unpack[4];     // lane k of word $w$ into $x$ (accumulator type)
  const char* pack;          // lanes $l0$..$l3$ into the word $o$ (for a 16-byte store)
  const char* store1;        // lane $l0$ as one element at $a$
};

constexpr TypeRow kTypes[] = {
    {DataType::f32, "f32", 4, kAccF32, false, 1,
     "ld.global.b32 $w$, [$a$];\n",
     {"mov.b32 $x$, $w$;\n"},
     "mov.b32 $o$, $l0$;\n",
     "st.global.f32 [$a$], $l0$;\n"},
    // bfloat16 is the upper half of a float32: widening is a shift (or a mask
    // for the odd lane, which already sits in the upper half).
    {DataType::bf16, "bf16", 2, kAccF32, false, 2,
     "ld.global.u16 $w$, [$a$];\n",
     {"shl.b32 %t0, $w$, 16;\nmov.b32 $x$, %t0;\n", "and.b32 %t0, $w$, -65536;\nmov.b32 $x$, %t0;\n"},
     "$narrow($l0$,%n0)$$narrow($l1$,%n1)$bfi.b32 $o$, %n1, %n0, 16, 16;\n",
     "$narrow($l0$,%n0)$st.global.b16 [$a$], %n0;\n"},
    {DataType::f16, "f16", 2, kAccF32, false, 2,
     "ld.global.u16 $w$, [$a$];\n",
     {"mov.b32 {%hl, %hh}, $w$;\ncvt.f32.f16 $x$, %hl;\n", "mov.b32 {%hl, %hh}, $w$;\ncvt.f32.f16 $x$, %hh;\n"},
     "cvt.rn.f16.f32 %hl, $l0$;\ncvt.rn.f16.f32 %hh, $l1$;\nmov.b32 $o$, {%hl, %hh};\n",
     "cvt.rn.f16.f32 %hl, $l0$;\nst.global.b16 [$a$], %hl;\n"},
    {DataType::i32, "i32", 4, kAccS32, false, 1,
     "ld.global.b32 $w$, [$a$];\n",
     {"mov.b32 $x$, $w$;\n"},
     "mov.b32 $o$, $l0$;\n",
     "st.global.b32 [$a$], $l0$;\n"},
    {DataType::i64, "i64", 8, kAccS64, true, 1,
     "ld.global.b64 $w$, [$a$];\n",
     {"mov.b64 $x$, $w$;\n"},
     "mov.b64 $o$, $l0$;\n",
     "st.global.b64 [$a$], $l0$;\n"},
    // uint8: bfe extracts a byte zero-extended; bfi puts the low 8 bits of
    // each lane back (the insertions cover bits 8..31, so lane 0's upper
    // bits never survive).
    {DataType::u8, "u8", 1, kAccU32, false, 4,
     "ld.global.u8 $w$, [$a$];\n",
     {"bfe.u32 $x$, $w$, 0, 8;\n", "bfe.u32 $x$, $w$, 8, 8;\n", "bfe.u32 $x$, $w$, 16, 8;\n",
      "bfe.u32 $x$, $w$, 24, 8;\n"},
     "bfi.b32 $o$, $l1$, $l0$, 8, 8;\nbfi.b32 $o$, $l2$, $o$, 16, 8;\nbfi.b32 $o$, $l3$, $o$, 24, 8;\n",
     "st.global.u8 [$a$], $l0$;\n"},
};

constexpr const char* kOpTags[5] = {"sum", "prod", "max", "min", "avg"};

const TypeRow* find_type(DataType t) {
  for (const TypeRow& r : kTypes)
    if (r.dtype == t) return &r;
  return nullptr;
}

bool known_op(ReduceOp op) { return static_cast<unsigned>(op) < 5; }

// The module header. The first is what the library asks for (sm_70 and PTX
// 7.0: any CUDA 11.0+ driver JITs it for Volta and everything after); the
// second is tried when a driver refuses the first (CUDA 13 dropped offline
// targets below sm_75) and is otherwise the same text.
struct Header {
  const char* version;
  const char* target;
};
constexpr Header kHeaders[] = {{"7.0", "sm_70"}, {"7.5", "sm_75"}};

// Loads in flight per element before they are combined: one group of the
// inputs. 64 inputs are 8 groups.
constexpr unsigned kGroup = 8;
// The grid's cap. Measured on an H200 (132 SMs; tests/backends/nv/reduce_kernel_hw_test.cpp),
// a 64 MiB float32 sum of 8 inputs: 32 blocks 0.227 ms (2.66 TB/s counting 8
// reads and 1 write), 64 blocks 0.160 ms, 132 blocks 0.146 ms (4.13 TB/s,
// the copy ceiling): a quarter of the SMs already gets about two thirds of
// the bandwidth and leaves the rest to the caller's kernels.
constexpr unsigned kThreads = 512;
constexpr unsigned kMaxBlocks = 32;

// ---------------------------------------------------------------- generator

// Replaces every $key$ of `tmpl` by its value. A $narrow(F,R)$ call expands
// kNarrowBf16 with $f$ = F and $r$ = R (after the outer keys are filled).
std::string fill(std::string tmpl, std::initializer_list<std::pair<const char*, std::string>> keys) {
  for (const auto& [k, v] : keys) {
    const std::string key = std::string("$") + k + "$";
    for (size_t p = tmpl.find(key); p != std::string::npos; p = tmpl.find(key, p + v.size()))
      tmpl.replace(p, key.size(), v);
  }
  for (size_t p = tmpl.find("$narrow("); p != std::string::npos; p = tmpl.find("$narrow(")) {
    const size_t comma = tmpl.find(',', p), close = tmpl.find(")$", p);
    const std::string f = tmpl.substr(p + 8, comma - p - 8), r = tmpl.substr(comma + 1, close - comma - 1);
    tmpl.replace(p, close + 2 - p, fill(kNarrowBf16, {{"f", f}, {"r", r}}));
  }
  return tmpl;
}

// Indents each line of a block by one tab (PTX does not care; people do).
std::string indent(const std::string& s) {
  std::string out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find('\n', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out += "\t" + s.substr(b, e - b) + "\n";
    b = e + 1;
  }
  return out;
}

// One shape of the per-element body: a 16-byte vector or one element.
struct Shape {
  bool vector;
  const char* label;  // label prefix, unique per shape
};

std::string body(const TypeRow& t, const AccRow& acc, ReduceOp op, const std::string& entry, Shape s) {
  const unsigned words = s.vector ? (t.wide ? 2 : 4) : 1;
  const unsigned lanes = s.vector ? words * t.lanes_per_word : 1;
  const char* wreg = t.wide ? "%q" : "%w";
  const unsigned wstride = t.wide ? 2 : 4;  // words a slot reserves
  auto word = [&](unsigned slot, unsigned w) { return wreg + std::to_string(slot * wstride + w); };
  auto lane_acc = [](unsigned j) { return "%acc" + std::to_string(j); };
  const std::string fin = std::string(s.label) + "_FIN";
  std::string o;
  for (unsigned g0 = 0; g0 < kMaxReduceInputs; g0 += kGroup) {
    o += "// inputs " + std::to_string(g0) + ".." + std::to_string(g0 + kGroup - 1) + "\n";
    if (g0 > 0) o += "setp.le.u32 %p1, %nin, " + std::to_string(g0) + ";\n@%p1 bra " + fin + ";\n";
    // The group's loads first (input 0 always exists; the others only when
    // k < n), so that up to eight are in flight at once.
    for (unsigned g = 0; g < kGroup; ++g) {
      const unsigned k = g0 + g;
      o += "ld.param.u64 %ptr, [" + entry + "_in+" + std::to_string(8 * k) + "];\n";
      o += "add.u64 %addr, %ptr, %off;\n";
      std::string guard;
      if (k > 0) {
        o += "setp.gt.u32 %pk" + std::to_string(g) + ", %nin, " + std::to_string(k) + ";\n";
        guard = "@%pk" + std::to_string(g) + " ";
      }
      if (s.vector) {
        std::string list;
        for (unsigned w = 0; w < words; ++w) list += (w ? ", " : "") + word(g, w);
        o += guard + (t.wide ? "ld.global.v2.b64 {" : "ld.global.v4.b32 {") + list + "}, [%addr];\n";
      } else {
        o += guard + fill(t.load1, {{"w", word(g, 0)}, {"a", "%addr"}});
      }
    }
    // Then the combines, in input order; past the last input, done.
    for (unsigned g = 0; g < kGroup; ++g) {
      const unsigned k = g0 + g;
      if (k > 0) o += "@!%pk" + std::to_string(g) + " bra " + fin + ";\n";
      for (unsigned j = 0; j < lanes; ++j) {
        const std::string w = word(g, j / t.lanes_per_word);
        const char* unpack = t.unpack[j % t.lanes_per_word];
        if (k == 0) {
          o += fill(unpack, {{"w", w}, {"x", lane_acc(j)}});
        } else {
          o += fill(unpack, {{"w", w}, {"x", "%x"}});
          o += fill(acc.combine[static_cast<unsigned>(op)], {{"acc", lane_acc(j)}, {"x", "%x"}});
        }
      }
    }
  }
  o += fin + ":\n";
  if (op == ReduceOp::avg)
    for (unsigned j = 0; j < lanes; ++j) o += fill(acc.avg, {{"acc", lane_acc(j)}});
  o += "add.u64 %addr, %out, %off;\n";
  if (s.vector) {
    const unsigned lpw = t.lanes_per_word;
    std::string list;
    for (unsigned w = 0; w < words; ++w) {
      const std::string ow = std::string(t.wide ? "%qo" : "%o") + std::to_string(w);
      o += fill(t.pack, {{"o", ow},
                         {"l0", lane_acc(w * lpw)},
                         {"l1", lane_acc(w * lpw + (lpw > 1 ? 1 : 0))},
                         {"l2", lane_acc(w * lpw + (lpw > 2 ? 2 : 0))},
                         {"l3", lane_acc(w * lpw + (lpw > 3 ? 3 : 0))}});
      list += (w ? ", " : "") + ow;
    }
    o += std::string(t.wide ? "st.global.v2.b64" : "st.global.v4.b32") + " [%addr], {" + list + "};\n";
  } else {
    o += fill(t.store1, {{"l0", lane_acc(0)}, {"a", "%addr"}});
  }
  return o;
}

std::string entry_name(const TypeRow& t, ReduceOp op) {
  return std::string("conccl_reduce_") + t.tag + "_" + kOpTags[static_cast<unsigned>(op)];
}

std::string generate(const TypeRow& t, ReduceOp op, const Header& h) {
  const AccRow& acc = kAccs[t.acc];
  const std::string e = entry_name(t, op);
  const unsigned vec_lanes = 16 / t.size;
  std::string o;
  o += "// ConCCL reduce step: " + std::string(t.tag) + " " + kOpTags[static_cast<unsigned>(op)] +
       " (generated by src/backends/nv/reduce_kernel.cpp)\n";
  o += std::string(".version ") + h.version + "\n.target " + h.target + "\n.address_size 64\n\n";
  o += ".visible .entry " + e + "(\n";
  o += "\t.param .align 8 .b8 " + e + "_in[" + std::to_string(8 * kMaxReduceInputs) + "],\n";
  o += "\t.param .u32 " + e + "_n,\n";
  o += "\t.param .u64 " + e + "_out,\n";
  o += "\t.param .u64 " + e + "_count,\n";
  o += "\t.param .u64 " + e + "_head,\n";
  o += "\t.param .u64 " + e + "_nvec\n)\n";
  o += ".maxntid " + std::to_string(kThreads) + ", 1, 1\n{\n";
  std::string d;
  d += ".reg .pred %p<2>;\n.reg .pred %pk<" + std::to_string(kGroup) + ">;\n.reg .pred %pc;\n.reg .pred %pa;\n";
  d += ".reg .b32 %r<4>;\n.reg .b32 %nin;\n.reg .b32 %t<3>;\n.reg .b32 %n<2>;\n.reg .b16 %hl;\n.reg .b16 %hh;\n";
  d += ".reg .b64 %ptr;\n.reg .b64 %addr;\n.reg .b64 %off;\n.reg .b64 %out;\n.reg .b64 %count;\n";
  d += ".reg .b64 %head;\n.reg .b64 %nvec;\n.reg .b64 %gid;\n.reg .b64 %stride;\n.reg .b64 %i;\n";
  d += ".reg .b64 %e;\n.reg .b64 %tmp;\n.reg .b64 %vlen;\n.reg .b64 %nsc;\n";
  d += ".reg .f32 %fdiv;\n.reg .b64 %ndiv;\n";
  if (t.wide) d += ".reg .b64 %q<" + std::to_string(2 * kGroup) + ">;\n.reg .b64 %qo<2>;\n";
  else d += ".reg .b32 %w<" + std::to_string(4 * kGroup) + ">;\n.reg .b32 %o<4>;\n";
  d += std::string(".reg ") + acc.reg + " %acc<" + std::to_string(vec_lanes) + ">;\n";
  d += std::string(".reg ") + acc.reg + " %x;\n";
  o += indent(d) + "\n";

  std::string b;
  b += "ld.param.u32 %nin, [" + e + "_n];\n";
  b += "ld.param.u64 %out, [" + e + "_out];\n";
  b += "ld.param.u64 %count, [" + e + "_count];\n";
  b += "ld.param.u64 %head, [" + e + "_head];\n";
  b += "ld.param.u64 %nvec, [" + e + "_nvec];\n";
  if (op == ReduceOp::avg) b += acc.setup;
  b += "mov.u32 %r0, %ctaid.x;\nmov.u32 %r1, %ntid.x;\nmov.u32 %r2, %tid.x;\nmov.u32 %r3, %nctaid.x;\n";
  b += "mul.wide.u32 %gid, %r0, %r1;\ncvt.u64.u32 %tmp, %r2;\nadd.u64 %gid, %gid, %tmp;\n";
  b += "mul.wide.u32 %stride, %r3, %r1;\n";
  // Vectors start after `head` single elements (the host picks head so that
  // every pointer is 16-byte aligned there; nvec is 0 when they cannot be).
  b += "// 16-byte vectors: byte offset head*size + 16*i\n";
  b += "mul.lo.u64 %tmp, %head, " + std::to_string(t.size) + ";\n";
  b += "mov.u64 %i, %gid;\n";
  b += "VEC_LOOP:\n";
  b += "setp.ge.u64 %p0, %i, %nvec;\n@%p0 bra VEC_END;\n";
  b += "shl.b64 %off, %i, 4;\nadd.u64 %off, %off, %tmp;\n";
  b += body(t, acc, op, e, {true, "VEC"});
  b += "add.u64 %i, %i, %stride;\nbra.uni VEC_LOOP;\n";
  b += "VEC_END:\n";
  // Single elements: item i < head is element i; the others are the tail,
  // element i + nvec*lanes (past the vectors).
  b += "// single elements: the head, then the tail after the vectors\n";
  b += "mul.lo.u64 %vlen, %nvec, " + std::to_string(vec_lanes) + ";\n";
  b += "add.u64 %nsc, %head, %vlen;\nsub.u64 %nsc, %count, %nsc;\nadd.u64 %nsc, %nsc, %head;\n";
  b += "mov.u64 %i, %gid;\n";
  b += "ONE_LOOP:\n";
  b += "setp.ge.u64 %p0, %i, %nsc;\n@%p0 bra ONE_END;\n";
  b += "mov.u64 %e, %i;\nsetp.ge.u64 %p1, %i, %head;\n@%p1 add.u64 %e, %i, %vlen;\n";
  b += "mul.lo.u64 %off, %e, " + std::to_string(t.size) + ";\n";
  b += body(t, acc, op, e, {false, "ONE"});
  b += "add.u64 %i, %i, %stride;\nbra.uni ONE_LOOP;\n";
  b += "ONE_END:\nret;\n";
  // Labels at column 0, instructions indented.
  std::string ind;
  size_t p = 0;
  while (p < b.size()) {
    size_t q = b.find('\n', p);
    const std::string line = b.substr(p, q - p);
    ind += (!line.empty() && line.back() == ':') ? line + "\n" : "\t" + line + "\n";
    p = q + 1;
  }
  o += ind + "}\n";
  return o;
}

// -------------------------------------------------------------- the driver

// What a user can do when the driver cannot run the kernel.
constexpr const char* kInstead = "reduce on the host (conccl::reduce_on_host)";

PtxSource source_for(const TypeRow& t, ReduceOp op) {
  return PtxSource{entry_name(t, op),
                   [&t, op] {
                     std::vector<std::string> texts;
                     for (const Header& h : kHeaders) texts.push_back(generate(t, op, h));
                     return texts;
                   },
                   kInstead};
}

// The grid: one thread per vector (or element), at most kMaxBlocks blocks
// and no more than a quarter of the SMs, so compute kernels keep the rest;
// CONCCL_REDUCE_BLOCKS replaces the cap (for tuning and measurements).
Result<unsigned> grid_blocks(uint64_t items, int sms) {
  unsigned cap = std::clamp<unsigned>(static_cast<unsigned>(std::max(sms, 4)) / 4, 1, kMaxBlocks);
  if (const char* env = std::getenv("CONCCL_REDUCE_BLOCKS")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != 0 || v < 1 || v > 1024)
      return error(Code::invalid_argument, std::string("CONCCL_REDUCE_BLOCKS=") + env +
                                               " is not a block count; set 1..1024 or unset it");
    return static_cast<unsigned>(v);
  }
  const uint64_t want = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<uint64_t>(want, 1, cap));
}

}  // namespace

std::string reduce_ptx(DataType dtype, ReduceOp op) {
  const TypeRow* t = find_type(dtype);
  if (!t || !known_op(op)) return "";
  return generate(*t, op, kHeaders[0]);
}

std::string reduce_entry_name(DataType dtype, ReduceOp op) {
  const TypeRow* t = find_type(dtype);
  if (!t || !known_op(op)) return "";
  return entry_name(*t, op);
}

Status launch_reduce(void* cu_stream, const DeviceReduceStep& step, ReduceLaunchInfo* info) {
  if (info) *info = ReduceLaunchInfo{};
  const TypeRow* t = find_type(step.dtype);
  if (!t)
    return error(Code::invalid_argument, "reduce kernel: unknown element type " +
                                             std::to_string(static_cast<int>(step.dtype)) +
                                             "; use one of DataType::f32, bf16, f16, i32, i64, u8");
  if (!known_op(step.op))
    return error(Code::invalid_argument, "reduce kernel: unknown operator " +
                                             std::to_string(static_cast<int>(step.op)) +
                                             "; use one of ReduceOp::sum, prod, max, min, avg");
  const size_t n = step.inputs.size();
  if (n == 0)
    return error(Code::invalid_argument, "reduce kernel: no inputs; pass at least one input address");
  if (n > kMaxReduceInputs)
    return error(Code::invalid_argument,
                 "reduce kernel: " + std::to_string(n) + " inputs, at most " + std::to_string(kMaxReduceInputs) +
                     " fit one step; reduce in steps of up to 64 (the result of one as input 0 of the next; "
                     "for avg, and for bf16/f16 which round between steps, the result then differs from one step)");
  if (step.count == 0) return Status();  // nothing to read or write
  if (step.count > UINT64_MAX / 16 / t->size)
    return error(Code::out_of_range,
                 "reduce kernel: count " + std::to_string(step.count) + " overflows a byte size; pass a smaller count");
  const uint64_t bytes = step.count * t->size;
  auto check_addr = [&](uint64_t a, const std::string& what) -> Status {
    if (a == 0)
      return error(Code::invalid_argument,
                   "reduce kernel: " + what + " is null; pass a device address CUDA can access");
    if (a % t->size != 0)
      return error(Code::invalid_argument,
                   "reduce kernel: " + what + " " + hex(a) + " is not aligned to the " + std::to_string(t->size) +
                       "-byte element; pass element-aligned addresses");
    return Status();
  };
  CONCCL_RETURN_IF_ERROR(check_addr(step.out, "out"));
  for (size_t k = 0; k < n; ++k) {
    const uint64_t in = step.inputs[k];
    CONCCL_RETURN_IF_ERROR(check_addr(in, "input " + std::to_string(k)));
    // In place (out == input) is fine: each thread reads its elements of all
    // inputs before it writes them. A shifted overlap would read elements
    // another thread may already have written.
    if (in != step.out && (in < step.out ? step.out - in < bytes : in - step.out < bytes))
      return error(Code::invalid_argument, "reduce kernel: out " + hex(step.out) + " overlaps input " +
                                               std::to_string(k) + " " + hex(in) +
                                               " without being the same buffer; reduce in place (out == "
                                               "input) or into a separate buffer");
  }

  // 16-byte vectors when every address is the same distance past a 16-byte
  // boundary: `head` single elements bring them all onto one; the remainder
  // after the last whole vector is the tail. Otherwise all single elements.
  const uint64_t mis = step.out % 16;
  bool same = true;
  for (uint64_t in : step.inputs) same = same && in % 16 == mis;
  const uint64_t lanes = 16 / t->size;
  uint64_t head = step.count, nvec = 0;
  if (same) {
    head = std::min<uint64_t>(step.count, (16 - mis) % 16 / t->size);
    nvec = (step.count - head) / lanes;
  }
  const uint64_t singles = step.count - nvec * lanes;

  const cuda_driver::CudaApi& d = cuda_driver::api();
  return with_ptx_kernel(cu_stream, source_for(*t, step.op), [&](const LoadedKernel& k) -> Status {
    Result<unsigned> blocks = grid_blocks(std::max(nvec, singles), k.sms);
    CONCCL_RETURN_IF_ERROR(blocks.status());
    // The kernel's parameters, in declaration order; the unused pointers are
    // zero and never read (every load past input n-1 is predicated off).
    uint64_t in[kMaxReduceInputs] = {};
    std::copy(step.inputs.begin(), step.inputs.end(), in);
    uint32_t n32 = static_cast<uint32_t>(n);
    uint64_t out = step.out, count = step.count;
    void* args[] = {in, &n32, &out, &count, &head, &nvec};
    CONCCL_RETURN_IF_ERROR(cu_result(
        d.cuLaunchKernel(k.fn, *blocks, 1, 1, kThreads, 1, 1, 0, cu_stream, args, nullptr),
        "cuLaunchKernel(" + entry_name(*t, step.op) + ", " + std::to_string(*blocks) + "x" +
            std::to_string(kThreads) + ")",
        "check the stream and that every address is device memory of the stream's context or mapped into it"));
    if (info) *info = ReduceLaunchInfo{static_cast<int>(*blocks), static_cast<int>(kThreads)};
    return Status();
  });
}

}  // namespace conccl::nv
