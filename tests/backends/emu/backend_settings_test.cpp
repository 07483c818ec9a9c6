// tests/backends/emu/backend_settings_test.cpp - the backend registry and the one
// pattern for backend extras (DeviceOptions::settings): emu's settings shape
// the node (as its deprecated fields still do), every backend refuses keys it does not know and
// names those it does, and malformed settings fail before any driver is
// touched.
#include <gtest/gtest.h>

#include "backends/settings.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

std::string open_error(const std::string& backend, const std::string& settings) {
  DeviceOptions o;
  o.backend = backend;
  o.settings = settings;
  Result<std::unique_ptr<Device>> d = open_device(o);
  EXPECT_FALSE(d.ok()) << backend << " opened with '" << settings << "'";
  return d.ok() ? "" : d.status().to_string();
}

TEST(BackendRegistry, NamesAndUnknownBackend) {
  EXPECT_EQ(backend_names(), (std::vector<std::string>{"emu", "kfd", "nv"}));
  DeviceOptions o;
  o.backend = "tpu";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::invalid_argument);
  EXPECT_NE(d.status().message().find("unknown backend 'tpu' (emu, kfd, nv)"), std::string::npos)
      << d.status().to_string();
}

TEST(BackendSettings, EmuSettingsShapeTheNode) {
  DeviceOptions o;
  o.settings = "preset=small  gpus=3 engines=2 memory_per_gpu=64M";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  const Topology& t = (*d)->topology();
  EXPECT_EQ(t.preset, "small(custom)");  // reshaped by gpus and engines
  ASSERT_EQ(t.gpus.size(), 3u);
  for (const GpuInfo& g : t.gpus) {
    EXPECT_EQ(g.engines.size(), 2u);
    EXPECT_EQ(g.memory_bytes, 64ull << 20);
  }
  // emu::create reads the same settings as open_device.
  Result<std::unique_ptr<emu::EmuDevice>> e = emu::create(o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ((*e)->topology().preset, "small(custom)");
  EXPECT_EQ((*e)->gpu_count(), 3);
  o.settings += " gpu=2";
  EXPECT_EQ(emu::create(o).status().code(), Code::invalid_argument) << "emu::create refuses unknown keys too";
}

// DeviceOptions' emulator fields are deprecated (#30) but keep working: alone
// they shape the node as the settings of the same names do, and beside a
// setting they must agree with it. This test names them on purpose.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(BackendSettings, DeprecatedEmuFieldsStillShapeTheNode) {
  DeviceOptions f;
  f.preset = "small";
  f.gpus = 3;
  f.engines = 2;
  f.memory_per_gpu = 64ull << 20;
  DeviceOptions s;
  s.settings = "preset=small gpus=3 engines=2 memory_per_gpu=64M";
  Result<std::unique_ptr<Device>> by_fields = open_device(f), by_settings = open_device(s);
  ASSERT_TRUE(by_fields.ok()) << by_fields.status().to_string();
  ASSERT_TRUE(by_settings.ok()) << by_settings.status().to_string();
  EXPECT_EQ(topology_json((*by_fields)->topology()), topology_json((*by_settings)->topology()));
  DeviceOptions g;
  g.preset = "small";
  g.gen = "5.2";
  Result<std::unique_ptr<emu::EmuDevice>> gen = emu::create(g);
  ASSERT_TRUE(gen.ok()) << gen.status().to_string();
  EXPECT_EQ((*gen)->topology().gpus[0].isa.gen(), sdma::Gen::v5_2);
  // The same value as a field and a setting is one request; different ones are refused.
  s.gpus = 3;
  EXPECT_TRUE(open_device(s).ok());
  s.gpus = 4;
  Result<std::unique_ptr<Device>> clash = open_device(s);
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("gpus is given twice"), std::string::npos) << clash.status().to_string();
}
#pragma GCC diagnostic pop

TEST(BackendSettings, UnknownKeysAreRefusedNamingTheKnownOnes) {
  const std::string emu = open_error("emu", "preset=small gpu=2");
  EXPECT_NE(emu.find("backend emu has no setting 'gpu'"), std::string::npos) << emu;
  EXPECT_NE(emu.find("preset, gpus, engines, gen, memory_per_gpu"), std::string::npos) << emu;
  // kfd and nv refuse theirs before looking for a driver, so this holds on any machine.
  const std::string kfd = open_error("kfd", "traps=off");
  EXPECT_NE(kfd.find("backend kfd has no setting 'traps'"), std::string::npos) << kfd;
  EXPECT_NE(kfd.find("trap, require_engine_ids"), std::string::npos) << kfd;
  const std::string nv = open_error("nv", "interrupts=0");
  EXPECT_NE(nv.find("backend nv has no setting 'interrupts'"), std::string::npos) << nv;
  EXPECT_NE(nv.find("interrupt_waits"), std::string::npos) << nv;
}

TEST(BackendSettings, MalformedValuesNameTheKeyAndWhatToGive) {
  EXPECT_NE(open_error("emu", "preset").find("'preset' is not key=value"), std::string::npos);
  EXPECT_NE(open_error("emu", "=small").find("is not key=value"), std::string::npos);
  EXPECT_NE(open_error("emu", "gpus=2 gpus=3").find("'gpus' is given twice"), std::string::npos);
  EXPECT_NE(open_error("emu", "gpus=two").find("gpus='two': give an integer in 0..65536"), std::string::npos);
  EXPECT_NE(open_error("emu", "gpus=-1").find("an integer in 0..65536"), std::string::npos);
  EXPECT_NE(open_error("emu", "memory_per_gpu=12Q").find("a non-negative integer"), std::string::npos);
  EXPECT_NE(open_error("kfd", "trap=maybe").find("trap='maybe': give one of auto, on, off"), std::string::npos);
  EXPECT_NE(open_error("kfd", "require_engine_ids=yes").find("give 0 or 1"), std::string::npos);
  EXPECT_NE(open_error("kfd", "pin_engines=always").find("pin_engines='always': give one of auto, on, off"),
            std::string::npos);
  EXPECT_NE(open_error("nv", "gpus=0,x").find("a list of indices like 0,1,1"), std::string::npos);
  EXPECT_NE(open_error("nv", "gpfifo_entries=8G").find("an integer below 2^32"), std::string::npos);
}

TEST(BackendSettings, ParsedValues) {
  Result<Settings> s = Settings::parse("a=0x10 b=2K c=1,2,3 d=on e=text", "test");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  uint64_t a = 0, b = 0;
  std::vector<int> c;
  bool d = false;
  std::string e, absent = "kept";
  ASSERT_TRUE(s->take("a", &a).ok());
  ASSERT_TRUE(s->take("b", &b).ok());
  ASSERT_TRUE(s->take("c", &c).ok());
  ASSERT_TRUE(s->take("d", &d).ok());
  ASSERT_TRUE(s->take("z", &absent).ok());
  EXPECT_EQ(a, 16u);
  EXPECT_EQ(b, 2048u);
  EXPECT_EQ(c, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(d);
  EXPECT_EQ(absent, "kept");
  Status left = s->finish();
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.message().find("no setting 'e' (its settings: a, b, c, d, z)"), std::string::npos)
      << left.to_string();
  ASSERT_TRUE(s->take("e", &e).ok());
  EXPECT_EQ(e, "text");
  EXPECT_TRUE(s->finish().ok());
}

}  // namespace
}  // namespace conccl
