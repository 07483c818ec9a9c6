// tools/bench/bench_packets.cpp - cost of the packet layer (packets/*).
//
// encode/<pkt>/sdma<gen>   span encoder, fields -> dwords (the hot path of a queue)
// decode/<pkt>/sdma<gen>   dwords -> Packet (fields vector; used by dis and hang diagnosis)
// length/<pkt>/sdma<gen>   packet_length only (used to skip packets)
// assemble/<pkt>/sdma<gen> one text line -> dwords (parse_line + encode)
// format/<pkt>/sdma<gen>   Packet -> text line
// split/...                split_copy of a large copy
//
// Each iteration handles kBatch packets with varying addresses; the s/pkt
// counter is CPU time per packet ("s/pkt=47.7n" = 47.7 ns). Results: docs/perf/packets.md.
#include <benchmark/benchmark.h>

#include <array>
#include <string>
#include <vector>

#include "packets/copy_split.hpp"
#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"

namespace {

using namespace conccl::sdma;

constexpr int kBatch = 64;

void report(benchmark::State& st) {
  const double items = static_cast<double>(st.iterations()) * kBatch;
  st.SetItemsProcessed(static_cast<int64_t>(items));
  // CPU seconds per packet, printed with an SI prefix: "s/pkt=47.7n" is 47.7 ns.
  st.counters["s/pkt"] =
      benchmark::Counter(items, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// The fields a queue would give; fields[0] is the address varied per packet.
struct Fields {
  std::array<FieldValue, 8> f{};
  size_t n = 0;
  void add(Key k, uint64_t v) { f[n++] = {k, v}; }
  std::span<const FieldValue> span() const { return {f.data(), n}; }
};

Fields fields_for(Gen g, Pkt p) {
  Fields fs;
  switch (p) {
    case Pkt::copy:
      fs.add(Key::src, 0x00007F0000001000);
      fs.add(Key::dst, 0x00007F0000200000);
      fs.add(Key::bytes, 4096);
      break;
    case Pkt::fence:
      fs.add(Key::addr, 0x00007F0000400000);
      fs.add(Key::value, 1);
      if (limits(g).fence_mtype_uc) fs.add(Key::mtype, 3);
      break;
    case Pkt::poll:
      fs.add(Key::addr, 0x00007F0000500000);
      fs.add(Key::ref, 0);
      fs.add(Key::mask, 0xFFFFFFFF);
      fs.add(Key::func, 3);
      fs.add(Key::interval, 4);
      fs.add(Key::retry, 0xFFF);
      break;
    case Pkt::atomic_add64:
      fs.add(Key::addr, 0x00007F0000600000);
      fs.add(Key::value, ~0ull);
      break;
    default: break;
  }
  return fs;
}

void bm_encode(benchmark::State& st, Gen g, Pkt p) {
  Fields fs = fields_for(g, p);
  const uint64_t base = fs.f[0].value;
  uint32_t out[16];
  for (auto _ : st) {
    for (int i = 0; i < kBatch; ++i) {
      fs.f[0].value = base + static_cast<uint64_t>(i) * 64;
      conccl::Result<size_t> n = encode(g, p, fs.span(), out);
      benchmark::DoNotOptimize(n);
      benchmark::DoNotOptimize(out);
    }
  }
  report(st);
}

// kBatch encoded packets of kind p with varying addresses.
std::vector<std::vector<uint32_t>> encoded_batch(Gen g, Pkt p) {
  Fields fs = fields_for(g, p);
  const uint64_t base = fs.f[0].value;
  std::vector<std::vector<uint32_t>> out;
  for (int i = 0; i < kBatch; ++i) {
    fs.f[0].value = base + static_cast<uint64_t>(i) * 64;
    std::vector<uint32_t> dw(16);
    conccl::Result<size_t> n = encode(g, p, fs.span(), dw);
    if (!n.ok()) std::abort();
    dw.resize(*n);
    out.push_back(std::move(dw));
  }
  return out;
}

// Times f on each of the kBatch inputs per iteration, its results kept.
template <typename Batch, typename F>
void time_each(benchmark::State& st, const Batch& batch, F f) {
  for (auto _ : st) {
    for (const auto& in : batch) {
      auto r = f(in);
      benchmark::DoNotOptimize(r);
    }
  }
  report(st);
}

void bm_decode(benchmark::State& st, Gen g, Pkt p) {
  time_each(st, encoded_batch(g, p), [g](const std::vector<uint32_t>& dw) { return decode(g, dw); });
}

void bm_length(benchmark::State& st, Gen g, Pkt p) {
  time_each(st, encoded_batch(g, p), [g](const std::vector<uint32_t>& dw) { return packet_length(g, dw); });
}

std::vector<std::string> text_batch(Gen g, Pkt p) {
  std::vector<std::string> out;
  for (const auto& dw : encoded_batch(g, p)) out.push_back(format_packet(*decode(g, dw)));
  return out;
}

void bm_assemble(benchmark::State& st, Gen g, Pkt p) {
  const auto lines = text_batch(g, p);
  std::vector<uint32_t> out;
  out.reserve(16);
  for (auto _ : st) {
    for (const std::string& line : lines) {
      out.clear();
      conccl::Status s = assemble_line(g, line, &out);
      benchmark::DoNotOptimize(s);
      benchmark::DoNotOptimize(out.data());
    }
  }
  report(st);
}

void bm_format(benchmark::State& st, Gen g, Pkt p) {
  std::vector<Packet> packets;
  for (const auto& dw : encoded_batch(g, p)) packets.push_back(*decode(g, dw));
  time_each(st, packets, [](const Packet& pk) { return format_packet(pk); });
}

void bm_split(benchmark::State& st, Gen g, uint64_t bytes) {
  for (auto _ : st) {
    size_t n = for_each_copy_chunk(g, 0x00007F0000001000, 0x00007F4000000000, bytes,
                                   [](const CopyChunk& c) { benchmark::DoNotOptimize(c); });
    benchmark::DoNotOptimize(n);
  }
  const double pieces = static_cast<double>(st.iterations()) *
                        static_cast<double>(copy_packet_count(g, 0, 0, bytes));
  st.SetItemsProcessed(static_cast<int64_t>(pieces));
  st.counters["s/pkt"] =
      benchmark::Counter(pieces, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

std::string gen_tag(Gen g) { return "sdma" + std::string(gen_name(g)); }

void register_all() {
  const Pkt hot[] = {Pkt::copy, Pkt::fence, Pkt::poll, Pkt::atomic_add64};
  for (Pkt p : hot)
    for (Gen g : kAllGens) {
      const std::string tail = std::string(packet_def(p).name) + "/" + gen_tag(g);
      benchmark::RegisterBenchmark(("encode/" + tail).c_str(), bm_encode, g, p);
    }
  for (Pkt p : hot)
    for (Gen g : kAllGens) {
      const std::string tail = std::string(packet_def(p).name) + "/" + gen_tag(g);
      benchmark::RegisterBenchmark(("decode/" + tail).c_str(), bm_decode, g, p);
    }
  for (Pkt p : hot)
    for (Gen g : {Gen::v4_4_2, Gen::v7}) {
      const std::string tail = std::string(packet_def(p).name) + "/" + gen_tag(g);
      benchmark::RegisterBenchmark(("length/" + tail).c_str(), bm_length, g, p);
    }
  for (Pkt p : hot)
    for (Gen g : {Gen::v4_4_2, Gen::v7}) {
      const std::string tail = std::string(packet_def(p).name) + "/" + gen_tag(g);
      benchmark::RegisterBenchmark(("assemble/" + tail).c_str(), bm_assemble, g, p);
      benchmark::RegisterBenchmark(("format/" + tail).c_str(), bm_format, g, p);
    }
  benchmark::RegisterBenchmark("split/9MiB/sdma4.4.2", bm_split, Gen::v4_4_2, uint64_t(9) << 20);
  benchmark::RegisterBenchmark("split/1GiB+3/sdma4.4.2", bm_split, Gen::v4_4_2, (uint64_t(1) << 30) + 3);
  benchmark::RegisterBenchmark("split/1GiB+3/sdma7", bm_split, Gen::v7, (uint64_t(1) << 30) + 3);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
