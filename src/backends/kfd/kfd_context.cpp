// src/backends/kfd/kfd_context.cpp - the fault watch, signal events and
// mappings of kfd_context.hpp.
#include "backends/kfd/kfd_context.hpp"

#include <dlfcn.h>

#include <map>

namespace conccl::kfd::detail {

void Context::poll_faults() {
  if ((!fault_event_ && !smi_.watching()) || faulted_.load(std::memory_order_acquire)) return;
  const int64_t now = now_ns();
  int64_t next = next_check_ns_.load(std::memory_order_relaxed);
  if (now < next || !next_check_ns_.compare_exchange_strong(next, now + 1000000)) return;
  std::unique_lock<std::mutex> lock(fault_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (!fault_event_) {
    const std::vector<std::string> found = smi_.poll(::getpid());
    bool any = false;
    for (size_t i = 0; i < found.size() && i < faults_.size(); ++i)
      if (!found[i].empty()) {
        faults_[i] = found[i];
        any = true;
      }
    if (any) faulted_.store(true, std::memory_order_release);
    return;
  }
  if (hsaKmtWaitOnEvent(fault_event_, 0) != HSAKMT_STATUS_SUCCESS) return;
  const HsaMemoryAccessFault& f = fault_event_->EventData.EventData.MemoryAccessFault;
  std::string kind;
  if (f.Failure.NotPresent) kind += " page not present";
  if (f.Failure.ReadOnly) kind += " write to read-only page";
  if (f.Failure.NoExecute) kind += " no-execute";
  if (f.Failure.ECC) kind += " ECC/RAS error";
  if (f.Failure.Imprecise) kind += " (imprecise address)";
  const std::string text = "GPU memory access fault at VA " + hex(f.VirtualAddress) + ":" +
                           (kind.empty() ? std::string(" unknown cause") : kind) +
                           "; KFD has stopped this process's queues on that GPU (the process must exit to recover). "
                           "Check that every address in the packets is mapped to the engine's GPU";
  bool matched = false;
  for (const GpuNode& g : topo.gpus)
    if (static_cast<HSAuint32>(g.thunk_node) == f.NodeId) {
      faults_[static_cast<size_t>(g.index)] = text;
      matched = true;
    }
  if (!matched)
    for (std::string& s : faults_) s = text;
  faulted_.store(true, std::memory_order_release);
}

Result<HsaEvent*> create_signal_event(int thunk_node) {
  HsaEventDescriptor d;
  std::memset(&d, 0, sizeof d);
  d.EventType = HSA_EVENTTYPE_SIGNAL;
  d.NodeId = static_cast<HSAuint32>(thunk_node);
  HsaEvent* ev = nullptr;
  errno = 0;
  // Auto-reset (ManualReset=false), not signaled (hsakmt.h hsaKmtCreateEvent).
  const HSAKMT_STATUS s = hsaKmtCreateEvent(&d, false, false, &ev);
  const int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS || !ev)
    return thunk_error("hsaKmtCreateEvent(HSA_EVENTTYPE_SIGNAL)", s, e,
                       "KFD allows 4096 signal events per process; destroy unused queues");
  return ev;
}

Status map_nodes(void* ptr, size_t size, const std::vector<uint32_t>& nodes, uint64_t* alt_va, const char* what) {
  HSAuint64 alt = 0;
  std::vector<HSAuint32> arr(nodes.begin(), nodes.end());
  errno = 0;
  const HSAKMT_STATUS s =
      hsaKmtMapMemoryToGPUNodes(ptr, size, &alt, no_map_flags(), static_cast<HSAuint64>(arr.size()), arr.data());
  const int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS)
    return thunk_error("hsaKmtMapMemoryToGPUNodes", s, e,
                       std::string("mapping ") + std::to_string(size) + " bytes of " + what + " to " +
                           std::to_string(arr.size()) + " GPU(s)");
  if (alt_va) *alt_va = alt;
  return Status();
}

// Matches our GPUs to the thunk's node ids by DRM render minor (present in
// sysfs and in HsaNodeProperties of every thunk version).
Status match_thunk_nodes(const SysTopology& sys, const RenderAccess& access, KfdTopology& topo,
                         const std::string& device_path) {
  Out<HsaSystemProperties> sp;
  errno = 0;
  HSAKMT_STATUS s = hsaKmtAcquireSystemProperties(sp.get());
  int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS)
    return thunk_error("hsaKmtAcquireSystemProperties", s, e,
                       "libhsakmt could not snapshot the KFD topology; if a GPU's /dev/dri/renderD* is not "
                       "accessible, add the user to the render and video groups");
  std::map<int, std::pair<uint32_t, std::pair<uint32_t, uint32_t>>> by_minor;  // minor -> node, (sdma, xgmi)
  for (HSAuint32 i = 0; i < sp->NumNodes; ++i) {
    Out<HsaNodeProperties> np;
    if (hsaKmtGetNodeProperties(i, np.get()) != HSAKMT_STATUS_SUCCESS) continue;
    if (np->NumFComputeCores == 0) continue;
    by_minor[np->DrmRenderMinor] = {i, {np->NumSdmaEngines, np->NumSdmaXgmiEngines}};
  }
  bool all = true;
  for (const GpuNode& g : topo.gpus) all = all && by_minor.count(g.drm_render_minor);
  if (!all) {
    // The thunk hides some GPU we saw: rebuild with its view.
    RenderAccess thunk_view = [&](int minor) { return by_minor.count(minor) ? access(minor) : ENOENT; };
    Result<KfdTopology> again = build_topology(sys, thunk_view);
    if (!again.ok()) return again.status().prefix("libhsakmt on " + device_path);
    topo = std::move(again).value();
  }
  for (GpuNode& g : topo.gpus) {
    const auto& [node, engines] = by_minor[g.drm_render_minor];
    g.thunk_node = static_cast<int>(node);
    if (static_cast<int>(engines.first) != g.num_sdma || static_cast<int>(engines.second) != g.num_xgmi)
      topo.topology.notes.push_back("gpu " + std::to_string(g.index) + ": libhsakmt reports " +
                                    std::to_string(engines.first) + "+" + std::to_string(engines.second) +
                                    " SDMA engines, sysfs " + std::to_string(g.num_sdma) + "+" +
                                    std::to_string(g.num_xgmi) + "; using sysfs");
  }
  return Status();
}

// Is a libhsa-runtime64 in the process, and does it use our libhsakmt? Up to
// ROCm 6.2 (and Debian's 5.2.3) it links libhsakmt.so.1, so its hsaKmt*
// resolve to the same functions as ours; from ROCm 6.3 the thunk is a static
// library inside it (ROCR-Runtime libhsakmt/CMakeLists.txt, hsacore.so.def
// exports no hsaKmt*), a second copy with its own events page.
ThunkSharing detect_thunk_sharing() {
  ThunkSharing t;
  for (const char* name : {"libhsa-runtime64.so.1", "libhsa-runtime64.so"}) {
    void* h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    t.hsa_runtime_loaded = true;
    void* theirs = dlsym(h, "hsaKmtOpenKFD");
    t.hsa_runtime_private_thunk = theirs != reinterpret_cast<void*>(&hsaKmtOpenKFD);
    dlclose(h);
    break;
  }
  return t;
}

// The first signal event sets the process's events page in KFD. If another
// thunk copy set it already, KFD says EINVAL: TRAP wake-ups go off, with a
// note, instead of every queue creation failing.
void probe_events_page(Context& ctx) {
  if (!ctx.trap.trap_wakeups || ctx.topo.gpus.empty()) return;
  HsaEventDescriptor d;
  std::memset(&d, 0, sizeof d);
  d.EventType = HSA_EVENTTYPE_SIGNAL;
  d.NodeId = static_cast<HSAuint32>(ctx.topo.gpus[0].thunk_node);
  HsaEvent* ev = nullptr;
  errno = 0;
  const HSAKMT_STATUS s = hsaKmtCreateEvent(&d, false, false, &ev);
  const int e = errno;
  if (s == HSAKMT_STATUS_SUCCESS && ev) {
    hsaKmtDestroyEvent(ev);  // the page stays ours; queues create their own events
    return;
  }
  if (is_events_page_conflict(s, e)) ctx.trap = TrapDecision{false, kTrapOffConflict};
  // Any other failure shows up, with its cause, when a queue creates its event.
}

}  // namespace conccl::kfd::detail
