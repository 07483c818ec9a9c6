// tests/fuzz/fuzz_asm.cpp - libFuzzer: any text through the SDMA assembler of
// every generation. It may refuse (an error Status), never crash; what it
// accepts must decode back into packets that re-encode to the same dwords.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"

using namespace conccl::sdma;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (Gen g : kAllGens) {
    conccl::Result<std::vector<uint32_t>> words = assemble(g, text);
    if (!words.ok()) continue;
    StreamDecode s = decode_stream(g, *words);
    if (!s.error.ok()) std::abort();  // asm wrote something its own decoder rejects
    for (const Packet& p : s.packets) {
      conccl::Result<std::vector<uint32_t>> again = encode(g, p);
      if (!again.ok()) std::abort();
    }
  }
  return 0;
}
