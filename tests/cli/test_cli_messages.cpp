// tests/cli/test_cli_messages.cpp - issue #24, item 15: the library's errors
// name an option by the API's field (DeviceOptions::gpus, with the C API's
// conccl_device_options.gpus), not by an sdma-probe flag - the library is
// used from C, Python and C++ - and sdma-probe adds its flag where it
// reports them.
#include <string>

#include <gtest/gtest.h>

#include "conccl/device.hpp"
#include "conccl/emu.hpp"
#include "probe_runner.hpp"

namespace {

using probe_test::contains;

// The message of opening an emulated device with `o`, which must fail.
std::string open_error(conccl::DeviceOptions o) {
  o.backend = "emu";
  conccl::Result<std::unique_ptr<conccl::Device>> d = conccl::open_device(o);
  EXPECT_FALSE(d.ok());
  return d.ok() ? std::string() : d.status().message();
}

// A word that starts with "--": a command-line flag.
bool quotes_a_flag(const std::string& m) {
  for (size_t i = m.find("--"); i != std::string::npos; i = m.find("--", i + 2))
    if (i + 2 < m.size() && m[i + 2] >= 'a' && m[i + 2] <= 'z') return true;
  return false;
}

TEST(LibraryMessages, DeviceOptionsAreNamedByTheirFields) {
  struct Case {
    conccl::DeviceOptions o;
    std::string field, c_field, value;
  };
  conccl::DeviceOptions gpus, engines, h200_gpus, h200_engines, h200_gen;
  gpus.gpus = 70;
  engines.engines = 40;
  h200_gpus.preset = h200_engines.preset = h200_gen.preset = "h200";
  h200_gpus.gpus = 65;
  h200_engines.engines = 2;
  h200_gen.gen = "5";
  for (const Case& c : {Case{gpus, "DeviceOptions::gpus", "conccl_device_options.gpus", "not 70"},
                        Case{engines, "DeviceOptions::engines", "conccl_device_options.engines", "not 40"},
                        Case{h200_gpus, "DeviceOptions::gpus", "conccl_device_options.gpus", "not 65"},
                        Case{h200_engines, "DeviceOptions::engines", "conccl_device_options.engines", "leave it 0"},
                        Case{h200_gen, "DeviceOptions::gen", "conccl_device_options.gen", "leave it empty"}}) {
    const std::string m = open_error(c.o);
    EXPECT_TRUE(contains(m, c.field)) << m;
    EXPECT_TRUE(contains(m, c.c_field)) << m;
    EXPECT_TRUE(contains(m, c.value)) << m;
    EXPECT_FALSE(quotes_a_flag(m)) << m;
  }
}

TEST(LibraryMessages, PresetDescriptionsNameNoFlags) {
  for (const auto& [name, text] : conccl::emu::presets()) EXPECT_FALSE(quotes_a_flag(text)) << name << ": " << text;
}

// sdma-probe adds the flag that set the field.
TEST(LibraryMessages, TheCliNamesItsFlag) {
  probe_test::Outcome e = probe_test::probe({"list", "--preset", "h200", "--engines", "2"});
  EXPECT_EQ(e.rc, 2) << e.err;
  EXPECT_TRUE(contains(e.err, "sdma-probe list: --engines: ")) << e.err;
  EXPECT_TRUE(contains(e.err, "DeviceOptions::engines")) << e.err;
  for (const char* flag : {"--gen", "--sdma-gen"}) {
    probe_test::Outcome g = probe_test::probe({"list", "--preset", "h200", flag, "5"});
    EXPECT_EQ(g.rc, 2) << g.err;
    EXPECT_TRUE(contains(g.err, std::string("sdma-probe list: ") + flag + ": ")) << g.err;
    EXPECT_TRUE(contains(g.err, "DeviceOptions::gen")) << g.err;
  }
}

}  // namespace
