// src/backends/topology.cpp - printing topologies (sdma-probe list).
#include <algorithm>
#include <cstdio>

#include "packets/generation.hpp"
#include "conccl/device.hpp"

namespace conccl {

const char* engine_kind_name(EngineKind k) {
  switch (k) {
    case EngineKind::pcie: return "pcie";
    case EngineKind::xgmi: return "xgmi";
    case EngineKind::copy: return "ce";
  }
  return "?";
}

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

const char* compare_name(EngineStatus::Compare c) {
  switch (c) {
    case EngineStatus::Compare::always: return "always";
    case EngineStatus::Compare::lt: return "<";
    case EngineStatus::Compare::le: return "<=";
    case EngineStatus::Compare::eq: return "==";
    case EngineStatus::Compare::ne: return "!=";
    case EngineStatus::Compare::ge: return ">=";
    case EngineStatus::Compare::gt: return ">";
  }
  return "?";
}

std::string EngineStatus::detail() const {
  std::string out = engine_state_name(state);
  if (state == State::polling) {
    // " (queue 3 waits on POLL_REGMEM: *0x1000 & 0xffffffff == 0x1; it reads 0x0)": a 32-bit
    // word shows its mask always (as POLL_REGMEM's text did); a 64-bit one reads *(u64*)addr,
    // with its mask only where it leaves bits out.
    const uint64_t width = wait.bits >= 64 ? ~0ull : (1ull << wait.bits) - 1;
    char buf[240];
    std::snprintf(buf, sizeof buf, " (queue %d waits on %s: *%s0x%llx", wait.queue,
                  wait.command && *wait.command ? wait.command : "memory", wait.bits >= 64 ? "(u64*)" : "",
                  static_cast<unsigned long long>(wait.addr));
    out += buf;
    if (wait.bits < 64 || wait.mask != ~0ull) {
      std::snprintf(buf, sizeof buf, " & 0x%llx", static_cast<unsigned long long>(wait.mask & width));
      out += buf;
    }
    std::snprintf(buf, sizeof buf, " %s 0x%llx; it reads 0x%llx)", compare_name(wait.compare),
                  static_cast<unsigned long long>(wait.target), static_cast<unsigned long long>(wait.seen));
    out += buf;
  }
  if (state == State::halted) out += " (fault: " + fault + ")";
  return out;
}

Result<std::vector<int>> engines_toward(const Topology& t, int gpu, int peer) {
  const int n = static_cast<int>(t.gpus.size());
  if (gpu < 0 || gpu >= n || peer < 0 || peer >= n)
    return error(Code::not_found, "engines toward GPU " + std::to_string(peer) + " from GPU " + std::to_string(gpu) +
                                      ": the topology has GPUs 0.." + std::to_string(n - 1));
  const GpuInfo& g = t.gpus[static_cast<size_t>(gpu)];
  std::vector<int> out;
  auto add = [&](int id) {
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (gpu != peer)
    if (const LinkInfo* l = g.link_to(peer))
      for (int e : l->recommended_engines) add(e);
  for (EngineKind want : {EngineKind::xgmi, EngineKind::pcie})
    for (const EngineInfo& e : g.engines)
      if (e.kind == want) add(e.id);
  std::vector<const EngineInfo*> ces;
  for (const EngineInfo& e : g.engines)
    if (e.kind == EngineKind::copy) ces.push_back(&e);
  std::stable_sort(ces.begin(), ces.end(), [](const EngineInfo* a, const EngineInfo* b) { return a->weight > b->weight; });
  for (const EngineInfo* e : ces) add(e->id);
  return out;
}

std::string topology_table(const Topology& t) {
  std::string out = "backend " + t.backend + (t.preset.empty() ? "" : " (preset " + t.preset + ")") + ", " +
                    std::to_string(t.gpus.size()) + " GPUs\n";
  for (const GpuInfo& g : t.gpus) {
    int pcie = 0, xgmi = 0, ce = 0;
    for (const EngineInfo& e : g.engines)
      (e.kind == EngineKind::pcie ? pcie : e.kind == EngineKind::xgmi ? xgmi : ce)++;
    if (ce > 0 && pcie == 0 && xgmi == 0) {
      // NVIDIA copy engines: "ce" ids with their weights (PCE counts).
      out += "gpu " + std::to_string(g.index) + ": " + g.name + ", " + std::to_string(ce) + " copy engines (ce:";
      for (const EngineInfo& e : g.engines) {
        char w[32];
        std::snprintf(w, sizeof w, "%g", e.weight);
        out += " " + std::to_string(e.id) + " (weight " + w + ")";
      }
      out += ")";
      if (g.memory_bytes) out += ", " + std::to_string(g.memory_bytes >> 20) + " MiB";
      out += "\n";
    } else {
      out += "gpu " + std::to_string(g.index) + ": " + g.name + ", " + g.isa.name() + ", " +
             std::to_string(g.engines.size()) + " engines (" + std::to_string(pcie) + " pcie: ";
      std::string ids_p, ids_x, ids_c;
      for (const EngineInfo& e : g.engines) {
        std::string& ids = e.kind == EngineKind::pcie ? ids_p : e.kind == EngineKind::xgmi ? ids_x : ids_c;
        ids += (ids.empty() ? "" : ",") + std::to_string(e.id);
      }
      out += ids_p + "; " + std::to_string(xgmi) + " xgmi: " + ids_x;
      if (ce) out += "; " + std::to_string(ce) + " ce: " + ids_c;
      out += ")";
      if (g.per_queue_bytes) {
        char mib[48];
        std::snprintf(mib, sizeof mib, ", %.1f MiB per queue", static_cast<double>(g.per_queue_bytes) / (1 << 20));
        out += mib;
      }
      out += "\n";
    }
    for (const LinkInfo& l : g.links) {
      out += "  -> gpu " + std::to_string(l.peer) + "  " + l.type + "  weight " + std::to_string(l.weight) +
             "  recommended engines ";
      for (size_t i = 0; i < l.recommended_engines.size(); ++i)
        out += (i ? "," : "") + std::to_string(l.recommended_engines[i]);
      out += "\n";
    }
  }
  for (const std::string& n : t.notes) out += "note: " + n + "\n";
  return out;
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string topology_json(const Topology& t) {
  std::string out = "{\"backend\": \"" + t.backend + "\", \"preset\": \"" + t.preset + "\", \"gpus\": [";
  for (size_t gi = 0; gi < t.gpus.size(); ++gi) {
    const GpuInfo& g = t.gpus[gi];
    out += std::string(gi ? ", " : "") + "{\"index\": " + std::to_string(g.index) +
           ", \"node_gpu_id\": " + std::to_string(g.node_gpu_id) + ", \"name\": \"" + g.name +
           "\", \"isa\": \"" + g.isa.name() +
           (g.isa.is_sdma() ? "\", \"sdma_generation\": \"" + std::string(sdma::gen_name(g.isa.gen())) : std::string()) +
           "\", \"memory_bytes\": " + std::to_string(g.memory_bytes) +
           (g.per_queue_bytes ? ", \"per_queue_bytes\": " + std::to_string(g.per_queue_bytes) : std::string()) +
           ", \"engines\": [";
    for (size_t i = 0; i < g.engines.size(); ++i)
    {
      out += std::string(i ? ", " : "") + "{\"id\": " + std::to_string(g.engines[i].id) + ", \"kind\": \"" +
             engine_kind_name(g.engines[i].kind) + "\"";
      if (g.engines[i].kind == EngineKind::copy) {  // NVIDIA: the weight is the PCE count
        char w[32];
        std::snprintf(w, sizeof w, "%g", g.engines[i].weight);
        out += std::string(", \"weight\": ") + w;
      }
      out += "}";
    }
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
  out += "], \"notes\": [";
  for (size_t i = 0; i < t.notes.size(); ++i) out += (i ? ", " : "") + json_string(t.notes[i]);
  return out + "]}\n";
}

}  // namespace conccl
