// src/backends/nv/wait_kernel.cpp - see wait_kernel.hpp.
//
// What the one thread does, for each of its kWaitKernelWords (va, value)
// pairs whose va is not 0, in order: read *va (volatile: the word sits in
// host memory that copy engines store into), and while (int64_t)(*va -
// value) < 0, sleep briefly (nanosleep, so that the polling does not flood
// the PCIe link) and read again, until %globaltimer says the budget has
// passed since the kernel began. Then a system-scope fence, so that nothing
// the stream runs after the kernel is ordered before the reads that passed.
#include "backends/nv/wait_kernel.hpp"

#include <atomic>

#include "backends/nv/cuda_api.hpp"
#include "backends/nv/ptx_module.hpp"
#include "util/env.hpp"

namespace conccl::nv {

namespace {

constexpr const char* kEntry = "conccl_wait_ge";

PtxSource wait_kernel_source() {
  return PtxSource{kEntry, [] { return std::vector<std::string>{wait_kernel_ptx("7.0", "sm_70")}; },
                   "set CONCCL_STREAM_WAITS=memop (the stream memory operations wait instead)"};
}

}  // namespace

std::string wait_kernel_ptx(const char* version, const char* target) {
  std::string p = std::string(".version ") + version + "\n.target " + target +
                  "\n.address_size 64\n\n"
                  ".visible .entry conccl_wait_ge(\n";
  for (size_t i = 0; i < kWaitKernelWords; ++i) {
    const std::string n = std::to_string(i);
    p += "\t.param .u64 conccl_wait_ge_va" + n + ",\n\t.param .u64 conccl_wait_ge_value" + n + ",\n";
  }
  p += "\t.param .u64 conccl_wait_ge_budget\n"
       ")\n"
       "{\n"
       "\t.reg .u64 %a;\n"
       "\t.reg .s64 %t;\n"
       "\t.reg .s64 %x;\n"
       "\t.reg .s64 %d;\n"
       "\t.reg .u64 %e;\n"
       "\t.reg .u64 %start;\n"
       "\t.reg .u64 %now;\n"
       "\t.reg .u64 %budget;\n"
       "\t.reg .pred %p;\n"
       "\tmov.u64 %start, %globaltimer;\n"
       "\tld.param.u64 %budget, [conccl_wait_ge_budget];\n";
  for (size_t i = 0; i < kWaitKernelWords; ++i) {
    const std::string n = std::to_string(i);
    p += "\tld.param.u64 %a, [conccl_wait_ge_va" + n + "];\n"
         "\tld.param.s64 %t, [conccl_wait_ge_value" + n + "];\n"
         "\tsetp.eq.u64 %p, %a, 0;\n"
         "\t@%p bra PASSED" + n + ";\n"
         "POLL" + n + ":\n"
         "\tld.volatile.global.s64 %x, [%a];\n"
         "\tsub.s64 %d, %x, %t;\n"
         "\tsetp.ge.s64 %p, %d, 0;\n"
         "\t@%p bra PASSED" + n + ";\n"
         "\tnanosleep.u32 100;\n"
         "\tmov.u64 %now, %globaltimer;\n"
         "\tsub.u64 %e, %now, %start;\n"
         "\tsetp.gt.u64 %p, %e, %budget;\n"
         "\t@%p bra DONE;\n"
         "\tbra POLL" + n + ";\n"
         "PASSED" + n + ":\n";
  }
  p += "DONE:\n"
       "\tmembar.sys;\n"
       "\tret;\n"
       "}\n";
  return p;
}

Status launch_wait_kernel(void* cu_stream, std::span<const StreamMemOp> waits, uint64_t budget_ns) {
  for (const StreamMemOp& w : waits)
    if (!w.wait || !w.va)
      return error(Code::invalid_argument, "wait kernel: every operation must be a wait on a non-null address");
  const PtxSource src = wait_kernel_source();
  const cuda_driver::CudaApi& d = cuda_driver::api();
  for (size_t at = 0; at < waits.size(); at += kWaitKernelWords) {
    uint64_t words[2 * kWaitKernelWords] = {};
    for (size_t i = 0; i < kWaitKernelWords && at + i < waits.size(); ++i) {
      words[2 * i] = waits[at + i].va;
      words[2 * i + 1] = waits[at + i].value;
    }
    uint64_t budget = budget_ns;
    void* args[2 * kWaitKernelWords + 1];
    for (size_t i = 0; i < 2 * kWaitKernelWords; ++i) args[i] = &words[i];
    args[2 * kWaitKernelWords] = &budget;
    CONCCL_RETURN_IF_ERROR(with_ptx_kernel(cu_stream, src, [&](const LoadedKernel& k) -> Status {
      return cu_result(d.cuLaunchKernel(k.fn, 1, 1, 1, 1, 1, 1, 0, cu_stream, args, nullptr),
                       std::string("cuLaunchKernel(") + kEntry + ")",
                       "check the stream and that the signal words are mapped into its context");
    }));
  }
  return Status();
}

StreamWaits stream_waits_mode() {
  static const StreamWaits mode = util::env_is("CONCCL_STREAM_WAITS", "kernel")  ? StreamWaits::kernel
                                  : util::env_is("CONCCL_STREAM_WAITS", "memop") ? StreamWaits::memop
                                                                                  : StreamWaits::automatic;
  return mode;
}

Status check_stream_waits_setting() {
  const std::string v = util::env_str("CONCCL_STREAM_WAITS");
  if (v.empty() || v == "auto" || v == "memop" || v == "kernel") return Status();
  return error(Code::invalid_argument,
               "CONCCL_STREAM_WAITS is '" + v +
                   "': set it to auto (the default: small calls' waits poll in a one-thread kernel where processes "
                   "share the GPU under CUDA MPS), kernel (small calls' waits always poll) or memop (CUDA's stream "
                   "memory operations for every wait), or unset it");
}

bool stream_context_uses_mps(void* cu_stream) {
  static std::atomic<int> known{-1};
  if (const int k = known.load(std::memory_order_acquire); k >= 0) return k == 1;
  bool mps = false;
  // The module's load reads the attribute for the stream's context's device
  // (ptx_module.cpp); loading it now costs nothing later, when the waits
  // are kernels.
  const Status st = with_ptx_kernel(cu_stream, wait_kernel_source(), [&](const LoadedKernel& k) {
    mps = k.mps;
    return Status();
  });
  known.store(st.ok() && mps ? 1 : 0, std::memory_order_release);
  return st.ok() && mps;
}

}  // namespace conccl::nv
