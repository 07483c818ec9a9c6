// src/backends/nv/cuda_graphs.cpp - what recording collectives into a CUDA
// graph asks of the driver (docs/graphs.md): whether a stream captures (and
// CONCCL_CUDA_GRAPHS=0 does not turn recording off) and an object the graph keeps alive
// (the replay tick's kernel node is replay_tick.cpp's).
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/nv/cuda_api.hpp"
#include "backends/nv/nv_device.hpp"

namespace conccl::nv {

using namespace cuda_driver;

// The stream capturing, unless CONCCL_CUDA_GRAPHS=0 turns recording off
// (docs/graphs.md; on by default since its H200 validation, docs/perf/h200-graphs.md).
bool stream_records_collectives(void* stream) {
  const char* on = std::getenv("CONCCL_CUDA_GRAPHS");
  if (on && std::string(on) == "0") return false;
  const CudaApi& a = api();
  if (!a.status.ok() || !a.cuStreamIsCapturing || !a.cuLaunchKernel || !a.cuStreamGetCaptureInfo ||
      !a.cuUserObjectCreate || !a.cuGraphRetainUserObject)
    return false;
  int capture = 0;
  return a.cuStreamIsCapturing(stream, &capture) == kCudaSuccess && capture == 1;
}

namespace {
void drop_retained(void* p) { delete static_cast<std::shared_ptr<void>*>(p); }
}  // namespace

// A user object owning `what`, moved into the graph the stream captures
// (cuda.h: CU_USER_OBJECT_NO_DESTRUCTOR_SYNC = 1, CU_GRAPH_USER_OBJECT_MOVE = 1):
// the graph releases it once it is destroyed and its launches are done.
Status stream_capture_retain(void* stream, std::shared_ptr<void> what) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamGetCaptureInfo || !a.cuUserObjectCreate || !a.cuGraphRetainUserObject)
    return error(Code::unavailable, "libcuda lacks cuStreamGetCaptureInfo_v2 / cuUserObjectCreate (CUDA 11.3+)");
  int status = 0;
  uint64_t id = 0;
  void* graph = nullptr;
  const void* deps = nullptr;
  size_t ndeps = 0;
  CONCCL_RETURN_IF_ERROR(
      cu_check(a.cuStreamGetCaptureInfo(stream, &status, &id, &graph, &deps, &ndeps), "cuStreamGetCaptureInfo"));
  if (status != 1 || !graph) return error(Code::invalid_argument, "the stream is not capturing a graph");
  auto* held = new std::shared_ptr<void>(std::move(what));
  void* obj = nullptr;
  Status st = cu_check(a.cuUserObjectCreate(&obj, held, drop_retained, 1, 1), "cuUserObjectCreate");
  if (!st.ok()) {
    delete held;
    return st;
  }
  return cu_check(a.cuGraphRetainUserObject(graph, obj, 1, 1), "cuGraphRetainUserObject");
}

}  // namespace conccl::nv
