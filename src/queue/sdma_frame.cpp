// src/queue/sdma_frame.cpp - the packets around every SDMA submission (see
// sdma_frame.hpp for why each is there).
#include "conccl/sdma_packets.hpp"
#include "queue/sdma_frame.hpp"

#include "conccl/commands.hpp"

namespace conccl {

namespace {

uint64_t bytes_of(const std::vector<std::vector<uint32_t>>& pkts) {
  uint64_t n = 0;
  for (const auto& p : pkts) n += p.size() * 4;
  return n;
}

Result<std::vector<uint32_t>> one(sdma::Gen gen, sdma::Pkt pkt, std::span<const sdma::FieldValue> f) {
  CommandBuffer cb(gen);
  CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).packet(pkt, f));
  return std::vector<uint32_t>(cb.dwords().begin(), cb.dwords().end());
}

}  // namespace

FramePolicy frame_policy(sdma::Gen gen, bool cpu_link_xgmi, uint32_t min_submit_bytes) {
  const sdma::Limits& l = sdma::limits(gen);
  FramePolicy p;
  p.hdp_flush = l.user_hdp_flush && !cpu_link_xgmi;
  p.gcr = l.has_gcr;
  p.min_submit_bytes = min_submit_bytes;
  return p;
}

std::string describe(const FramePolicy& p) {
  std::string s;
  if (p.hdp_flush) s += "hdp-flush";
  if (p.gcr) s += std::string(s.empty() ? "" : " ") + "gcr";
  if (p.min_submit_bytes) s += std::string(s.empty() ? "" : " ") + "min-submit=" + std::to_string(p.min_submit_bytes);
  return s.empty() ? "none" : s;
}

uint64_t SubmitFrame::prologue_bytes() const { return bytes_of(prologue); }
uint64_t SubmitFrame::epilogue_bytes() const { return bytes_of(epilogue); }
uint64_t SubmitFrame::overhead_bytes() const {
  return prologue_bytes() + epilogue_bytes() + policy.min_submit_bytes + fence.size() * 4;
}

Result<SubmitFrame> make_frame(sdma::Gen gen, const FramePolicy& policy, uint64_t done_va) {
  if (done_va & 3)
    return error(Code::invalid_argument, "the queue's completion word at " + hex(done_va) +
                                             " is not 4-byte aligned (FENCE writes whole dwords)");
  if (policy.min_submit_bytes & 3)
    return error(Code::invalid_argument, "minimum submission size " + std::to_string(policy.min_submit_bytes) +
                                             " is not a multiple of 4 bytes");
  SubmitFrame f;
  f.policy = policy;
  using sdma::Key;
  using sdma::Pkt;
  if (policy.hdp_flush) {
    const sdma::FieldValue v[] = {{Key::req, kHdpFlushReq}};
    Result<std::vector<uint32_t>> p = one(gen, Pkt::poll_reg, v);
    if (!p.ok()) return p.status().prefix("HDP flush");
    f.prologue.push_back(std::move(p).value());
  }
  if (policy.gcr) {
    const sdma::FieldValue inv[] = {{Key::control, kGcrInvalidate}};
    const sdma::FieldValue wb[] = {{Key::control, kGcrWriteBack}};
    Result<std::vector<uint32_t>> a = one(gen, Pkt::gcr_user, inv);
    if (!a.ok()) return a.status().prefix("GCR invalidate (SDMA " + std::string(sdma::gen_name(gen)) + ")");
    Result<std::vector<uint32_t>> b = one(gen, Pkt::gcr_user, wb);
    if (!b.ok()) return b.status().prefix("GCR write-back");
    f.prologue.push_back(std::move(a).value());
    f.epilogue.push_back(std::move(b).value());
  }
  CommandBuffer fence(gen);
  CONCCL_RETURN_IF_ERROR(SdmaPackets(fence).fence(done_va, 0));
  f.fence.assign(fence.dwords().begin(), fence.dwords().end());
  if (f.fence.size() <= SubmitFrame::kFenceValueDword)
    return error(Code::internal, "FENCE encodes to " + std::to_string(f.fence.size()) + " dwords; expected 4");
  return f;
}

}  // namespace conccl
