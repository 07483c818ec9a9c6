// src/backends/nv/replay_tick.cpp - see replay_tick.hpp.
//
// What the one thread does (StreamOps::ReplayTick): when *stop is 0, store 0
// at *reset, fence, then *counter = *counter + 1; otherwise store 1 at
// *reset. Every access is volatile at system scope (ld/st.volatile plus
// membar.sys): the words sit in host memory that copy engines and the host
// read, and the armed lists must not see the new count before the reset,
// nor the host see the reset after the count. Only this kernel writes the
// counter while its graph lives, so a plain read-add-store is enough (no
// PCIe atomics needed).
#include "backends/nv/replay_tick.hpp"

#include "backends/nv/cuda_api.hpp"
#include "backends/nv/ptx_module.hpp"

namespace conccl::nv {

namespace {

constexpr const char* kEntry = "conccl_replay_tick";

}  // namespace

std::string replay_tick_ptx(const char* version, const char* target) {
  return std::string(".version ") + version + "\n.target " + target +
         "\n.address_size 64\n\n"
         ".visible .entry conccl_replay_tick(\n"
         "\t.param .u64 conccl_replay_tick_counter,\n"
         "\t.param .u64 conccl_replay_tick_reset,\n"
         "\t.param .u64 conccl_replay_tick_stop\n"
         ")\n"
         "{\n"
         "\t.reg .u64 %c;\n"
         "\t.reg .u64 %r;\n"
         "\t.reg .u64 %s;\n"
         "\t.reg .u64 %v;\n"
         "\t.reg .pred %p;\n"
         "\tld.param.u64 %c, [conccl_replay_tick_counter];\n"
         "\tld.param.u64 %r, [conccl_replay_tick_reset];\n"
         "\tld.param.u64 %s, [conccl_replay_tick_stop];\n"
         "\tld.volatile.global.u64 %v, [%s];\n"
         "\tsetp.ne.u64 %p, %v, 0;\n"
         "\t@%p bra STOPPED;\n"
         "\tst.volatile.global.u64 [%r], 0;\n"
         "\tmembar.sys;\n"
         "\tld.volatile.global.u64 %v, [%c];\n"
         "\tadd.u64 %v, %v, 1;\n"
         "\tst.volatile.global.u64 [%c], %v;\n"
         "\tmembar.sys;\n"
         "\tret;\n"
         "STOPPED:\n"
         "\tst.volatile.global.u64 [%r], 1;\n"
         "\tmembar.sys;\n"
         "\tret;\n"
         "}\n";
}

Status launch_replay_tick(void* cu_stream, const StreamOps::ReplayTick& tick) {
  if (!tick.counter || !tick.reset || !tick.stop)
    return error(Code::invalid_argument, "replay tick: a null address (counter, reset and stop are all needed)");
  const PtxSource src{kEntry,
                      [] {
                        return std::vector<std::string>{replay_tick_ptx("7.0", "sm_70"),
                                                        replay_tick_ptx("7.5", "sm_75")};
                      },
                      "set CONCCL_CUDA_GRAPHS=0 and make collective calls outside graph capture"};
  const cuda_driver::CudaApi& d = cuda_driver::api();
  return with_ptx_kernel(cu_stream, src, [&](const LoadedKernel& k) -> Status {
    uint64_t counter = tick.counter, reset = tick.reset, stop = tick.stop;
    void* args[] = {&counter, &reset, &stop};
    return cu_result(d.cuLaunchKernel(k.fn, 1, 1, 1, 1, 1, 1, 0, cu_stream, args, nullptr),
                     std::string("cuLaunchKernel(") + kEntry + ")",
                     "check the stream and that the signal words are mapped into its context");
  });
}

}  // namespace conccl::nv
