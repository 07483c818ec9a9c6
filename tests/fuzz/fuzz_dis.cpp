// tests/fuzz/fuzz_dis.cpp - libFuzzer: any bytes, read as dwords, through the
// SDMA decoder of every generation; every packet it decodes must print
// (disassemble_exact) as text that the assembler turns back into exactly the
// same dwords - the `sdma-probe dis | sdma-probe asm` round trip.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"
#include "packets/sdma_dis.hpp"

using namespace conccl::sdma;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint32_t> words(size / 4);
  if (!words.empty()) std::memcpy(words.data(), data, words.size() * 4);
  for (Gen g : kAllGens) {
    StreamDecode s = decode_stream(g, words);
    for (size_t i = 0; i < s.packets.size(); ++i) {
      const Packet& p = s.packets[i];
      std::span<const uint32_t> mine(words.data() + s.offsets[i], p.dwords);
      const std::string text = disassemble_exact(g, mine, p);
      conccl::Result<std::vector<uint32_t>> back = assemble(g, text);
      if (!back.ok() || *back != std::vector<uint32_t>(mine.begin(), mine.end())) std::abort();
    }
  }
  return 0;
}
