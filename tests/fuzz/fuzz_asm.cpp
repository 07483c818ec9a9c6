// tests/fuzz/fuzz_asm.cpp - libFuzzer: any text through the SDMA assembler of
// every generation. It may refuse (an error Status), never crash; what it
// accepts from a packet line must decode back into packets that re-encode to
// the same dwords. A `raw data=...` line emits its dwords unchecked by design
// (docs/asm.md, "raw": no opcode, length or field rules; sdma-probe exec
// submits any words with it), so its dwords are only assembled, not decoded:
// a fuzzed `raw data=0xff` is an accepted line that no decoder reads.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"

using namespace conccl::sdma;

namespace {

// The rule assemble_line uses (packets/sdma_asm.cpp): the code before '#',
// trimmed, is "raw" alone or "raw" and a space.
bool is_raw_line(std::string_view line) {
  std::string_view code = line.substr(0, line.find('#'));
  while (!code.empty() && std::isspace(static_cast<unsigned char>(code.front()))) code.remove_prefix(1);
  while (!code.empty() && std::isspace(static_cast<unsigned char>(code.back()))) code.remove_suffix(1);
  return code.substr(0, 3) == "raw" && (code.size() == 3 || std::isspace(static_cast<unsigned char>(code[3])));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (Gen g : kAllGens) {
    (void)assemble(g, text);  // the whole text: refused or not, never a crash
    std::string_view rest = text;
    while (true) {
      const size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      std::vector<uint32_t> words;
      bool produced = false;
      if (assemble_line(g, line, &words, &produced).ok() && produced && !is_raw_line(line)) {
        StreamDecode s = decode_stream(g, words);
        if (!s.error.ok()) std::abort();  // asm wrote a packet its own decoder rejects
        for (const Packet& p : s.packets) {
          conccl::Result<std::vector<uint32_t>> again = encode(g, p);
          if (!again.ok()) std::abort();
        }
      }
      if (nl == std::string_view::npos) break;
      rest = rest.substr(nl + 1);
    }
  }
  return 0;
}
