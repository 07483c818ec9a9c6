// tools/bench/nv_graph_launch_probe.cpp - does cuGraphLaunch block the host
// while an earlier launch waits on the GPU? (issue #29: a captured 1 KiB
// all-gather's replay spent ~30 of its ~34 us inside cuGraphLaunch, while a
// graph of a satisfied wait launches in ~3.5 us.) CUDA driver API only.
//
// For a graph of one wait-value node (the word 0, so the wait holds), in
// host-pinned and in device memory: 4 launches back to back, each timed on
// the host, with a second thread storing 1 after 100 ms; and the same four
// waits queued without a graph (cuStreamWaitValue64). A launch that takes
// ~100 ms waited for the earlier one to finish. Then keeper_loop: the replay
// protocol with a host thread in the keeper's place and no engine work.
//
//   nv_graph_launch_probe
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cuda_check.hpp"

namespace {


double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

// Four launches (graph) or four waits (no graph) on `word`, released by a
// thread after 100 ms; prints each call's host time.
int probe(CUcontext ctx, CUstream s, CUdeviceptr word, volatile uint64_t* host_word, bool graph, const char* what) {
  CU_CHECK(cuMemsetD8Async(word, 0, 8, s));
  CU_CHECK(cuStreamSynchronize(s));
  CUgraph g = nullptr;
  CUgraphExec ge = nullptr;
  if (graph) {
    CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU_CHECK(cuStreamWaitValue64(s, word, 1, 0));
    CU_CHECK(cuStreamEndCapture(s, &g));
    CU_CHECK(cuGraphInstantiateWithFlags(&ge, g, 0));
  }
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (host_word) {
      *host_word = 1;
    } else {
      cuCtxSetCurrent(ctx);
      const uint64_t one = 1;
      cuMemcpyHtoD(word, &one, 8);
    }
  });
  std::printf("%-34s", what);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) {
    const auto h = std::chrono::steady_clock::now();
    if (graph) CU_CHECK(cuGraphLaunch(ge, s));
    else CU_CHECK(cuStreamWaitValue64(s, word, 1, 0));
    std::printf(" %10.1f", us_since(h));
  }
  CU_CHECK(cuStreamSynchronize(s));
  std::printf(" %10.1f\n", us_since(t0));
  release.join();
  if (graph) {
    CU_CHECK(cuGraphExecDestroy(ge));
    CU_CHECK(cuGraphDestroy(g));
  }
  return 0;
}

// The replay protocol of a captured call by writes (docs/graphs.md) with a
// host thread as the keeper and nothing on the engines: the graph stores 0
// in the low half of `done` and 1 at `flag`, then waits for done >= 1; the
// thread sees the flag, clears it and stores done = 1. The floor of a
// replay's time; host time per launch beside it.
int keeper_loop(CUstream s, uint64_t* words, CUdeviceptr words_dev, int iters) {
  volatile uint64_t* flag = words;
  volatile uint64_t* done = words + 1;
  *flag = 0;
  *done = 0;
  CUgraph g = nullptr;
  CUgraphExec ge = nullptr;
  CU_CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_CHECK(cuStreamWriteValue32(s, words_dev + 8, 0, 0));
  CU_CHECK(cuStreamWriteValue64(s, words_dev, 1, 0));
  CU_CHECK(cuStreamWaitValue64(s, words_dev + 8, 1, 0));
  CU_CHECK(cuStreamEndCapture(s, &g));
  CU_CHECK(cuGraphInstantiateWithFlags(&ge, g, 0));
  volatile bool stop = false;
  std::thread keeper([&] {
    while (!stop) {
      if (*flag) {
        *flag = 0;
        *done = 1;
      }
    }
  });
  double host = 0;
  for (int i = 0; i < 10; ++i) CU_CHECK(cuGraphLaunch(ge, s));
  CU_CHECK(cuStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    const auto h = std::chrono::steady_clock::now();
    CU_CHECK(cuGraphLaunch(ge, s));
    host += us_since(h);
  }
  CU_CHECK(cuStreamSynchronize(s));
  const double all = us_since(t0);
  stop = true;
  keeper.join();
  std::printf("replay protocol with a host keeper, no engine work: %.2f us per replay, host %.2f us per launch\n",
              all / iters, host / iters);
  CU_CHECK(cuGraphExecDestroy(ge));
  CU_CHECK(cuGraphDestroy(g));
  return 0;
}

}  // namespace

int main() {
  CU_CHECK(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* host = nullptr;
  CU_CHECK(cuMemHostAlloc(&host, 8, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr host_dev = 0, dev_word = 0;
  CU_CHECK(cuMemHostGetDevicePointer(&host_dev, host, 0));
  CU_CHECK(cuMemAlloc(&dev_word, 8));
  std::printf("%-34s %10s %10s %10s %10s %10s   (host us per call; the wait is released at 100000 us)\n", "form",
              "call 1", "call 2", "call 3", "call 4", "all done");
  for (int graph = 1; graph >= 0; --graph) {
    std::memset(host, 0, 8);
    if (probe(ctx, s, host_dev, static_cast<volatile uint64_t*>(host), graph,
              graph ? "graph launch, wait on host memory" : "stream wait, host memory"))
      return 1;
    if (probe(ctx, s, dev_word, nullptr, graph, graph ? "graph launch, wait on device memory" : "stream wait, device memory"))
      return 1;
  }
  void* words = nullptr;
  CUdeviceptr words_dev = 0;
  CU_CHECK(cuMemHostAlloc(&words, 16, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CU_CHECK(cuMemHostGetDevicePointer(&words_dev, words, 0));
  if (keeper_loop(s, static_cast<uint64_t*>(words), words_dev, 1000)) return 1;
  CU_CHECK(cuMemFreeHost(words));
  CU_CHECK(cuMemFreeHost(host));
  CU_CHECK(cuMemFree(dev_word));
  return 0;
}
