// src/topology.cpp - printing topologies (sdma-probe list).
#include <cstdio>

#include "conccl/device.hpp"

namespace conccl {

const char* engine_kind_name(EngineKind k) { return k == EngineKind::pcie ? "pcie" : "xgmi"; }

const char* engine_state_name(EngineStatus::State s) {
  switch (s) {
    case EngineStatus::State::idle: return "idle";
    case EngineStatus::State::running: return "running";
    case EngineStatus::State::polling: return "polling";
    case EngineStatus::State::stalled: return "stalled";
    case EngineStatus::State::halted: return "halted";
    case EngineStatus::State::unknown: return "unknown";
  }
  return "?";
}

std::string EngineStatus::detail() const {
  std::string out = engine_state_name(state);
  char buf[200];
  if (state == State::polling) {
    static const char* kFunc[] = {"always", "<", "<=", "==", "!=", ">=", ">", "reserved"};
    std::snprintf(buf, sizeof buf,
                  " (queue %d waits on POLL_REGMEM: *0x%llx & 0x%x %s 0x%x; it reads 0x%x)", poll_queue,
                  static_cast<unsigned long long>(poll_addr), poll_mask, kFunc[poll_func & 7], poll_ref,
                  poll_value);
    out += buf;
  }
  if (state == State::halted) out += " (fault: " + fault + ")";
  return out;
}

std::string topology_table(const Topology& t) {
  std::string out = "backend " + t.backend + (t.preset.empty() ? "" : " (preset " + t.preset + ")") + ", " +
                    std::to_string(t.gpus.size()) + " GPUs\n";
  for (const GpuInfo& g : t.gpus) {
    int pcie = 0, xgmi = 0;
    for (const EngineInfo& e : g.engines) (e.kind == EngineKind::pcie ? pcie : xgmi)++;
    out += "gpu " + std::to_string(g.index) + ": " + g.name + ", SDMA " + std::string(sdma::gen_name(g.gen)) + ", " +
           std::to_string(g.engines.size()) + " engines (" + std::to_string(pcie) + " pcie: ";
    std::string ids_p, ids_x;
    for (const EngineInfo& e : g.engines)
      (e.kind == EngineKind::pcie ? ids_p : ids_x) += (e.kind == EngineKind::pcie ? (ids_p.empty() ? "" : ",") : (ids_x.empty() ? "" : ",")) + std::to_string(e.id);
    out += ids_p + "; " + std::to_string(xgmi) + " xgmi: " + ids_x + ")\n";
    for (const LinkInfo& l : g.links) {
      out += "  -> gpu " + std::to_string(l.peer) + "  " + l.type + "  weight " + std::to_string(l.weight) +
             "  recommended engines ";
      for (size_t i = 0; i < l.recommended_engines.size(); ++i)
        out += (i ? "," : "") + std::to_string(l.recommended_engines[i]);
      out += "\n";
    }
  }
  return out;
}

std::string topology_json(const Topology& t) {
  std::string out = "{\"backend\": \"" + t.backend + "\", \"preset\": \"" + t.preset + "\", \"gpus\": [";
  for (size_t gi = 0; gi < t.gpus.size(); ++gi) {
    const GpuInfo& g = t.gpus[gi];
    out += std::string(gi ? ", " : "") + "{\"index\": " + std::to_string(g.index) + ", \"name\": \"" + g.name +
           "\", \"sdma_generation\": \"" + std::string(sdma::gen_name(g.gen)) +
           "\", \"memory_bytes\": " + std::to_string(g.memory_bytes) + ", \"engines\": [";
    for (size_t i = 0; i < g.engines.size(); ++i)
      out += std::string(i ? ", " : "") + "{\"id\": " + std::to_string(g.engines[i].id) + ", \"kind\": \"" +
             engine_kind_name(g.engines[i].kind) + "\"}";
    out += "], \"links\": [";
    for (size_t i = 0; i < g.links.size(); ++i) {
      const LinkInfo& l = g.links[i];
      out += std::string(i ? ", " : "") + "{\"peer\": " + std::to_string(l.peer) + ", \"type\": \"" + l.type +
             "\", \"weight\": " + std::to_string(l.weight) + ", \"recommended_engines\": [";
      for (size_t k = 0; k < l.recommended_engines.size(); ++k)
        out += (k ? ", " : "") + std::to_string(l.recommended_engines[k]);
      out += "]}";
    }
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace conccl
