// tests/cli/test_cli_messages.cpp - issue #24, item 15: the library's errors
// name an option by the API's name for it - the emulator's settings key
// (DeviceOptions::settings, with the C API's conccl_device_options.settings;
// #30 made settings the one way) - not by an sdma-probe flag - the library is
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

TEST(LibraryMessages, DeviceOptionsAreNamedByTheirSettings) {
  struct Case {
    std::string settings;
    std::string setting, where, value;
  };
  for (const Case& c :
       {Case{"gpus=70", "setting gpus", "DeviceOptions::settings \"gpus=N\"", "not 70"},
        Case{"engines=40", "setting engines", "DeviceOptions::settings \"engines=K\"", "not 40"},
        Case{"preset=h200 gpus=65", "setting gpus", "DeviceOptions::settings \"gpus=N\"", "not 65"},
        Case{"preset=h200 engines=2", "setting engines", "DeviceOptions::settings \"engines=K\"", "leave it out"},
        Case{"preset=h200 gen=5", "setting gen", "DeviceOptions::settings \"gen=GEN\"", "leave it out"}}) {
    conccl::DeviceOptions o;
    o.settings = c.settings;
    const std::string m = open_error(o);
    EXPECT_TRUE(contains(m, c.setting)) << m;
    EXPECT_TRUE(contains(m, c.where)) << m;
    EXPECT_TRUE(contains(m, "conccl_device_options.settings")) << m;
    EXPECT_TRUE(contains(m, c.value)) << m;
    EXPECT_FALSE(quotes_a_flag(m)) << m;
  }
}

TEST(LibraryMessages, PresetDescriptionsNameNoFlags) {
  for (const auto& [name, text] : conccl::emu::presets()) EXPECT_FALSE(quotes_a_flag(text)) << name << ": " << text;
}

// sdma-probe adds the flag that set the setting.
TEST(LibraryMessages, TheCliNamesItsFlag) {
  probe_test::Outcome e = probe_test::probe({"list", "--preset", "h200", "--engines", "2"});
  EXPECT_EQ(e.rc, 2) << e.err;
  EXPECT_TRUE(contains(e.err, "sdma-probe list: --engines: ")) << e.err;
  EXPECT_TRUE(contains(e.err, "setting engines")) << e.err;
  for (const char* flag : {"--gen", "--sdma-gen"}) {
    probe_test::Outcome g = probe_test::probe({"list", "--preset", "h200", flag, "5"});
    EXPECT_EQ(g.rc, 2) << g.err;
    EXPECT_TRUE(contains(g.err, std::string("sdma-probe list: ") + flag + ": ")) << g.err;
    EXPECT_TRUE(contains(g.err, "setting gen")) << g.err;
  }
}

}  // namespace
