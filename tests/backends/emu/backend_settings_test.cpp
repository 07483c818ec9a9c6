// tests/backends/emu/backend_settings_test.cpp - the backend registry and the one
// pattern for backend extras (DeviceOptions::settings): emu's settings shape
// the node (as the C struct's older fields do), every backend refuses keys it does not know and
// names those it does, and malformed settings fail before any driver is
// touched.
#include <gtest/gtest.h>

#include "backends/settings.hpp"
#include "conccl/conccl.h"
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

// The C struct's emulator fields (deprecated, #30; kept in the struct for the
// ABI) become the settings of the same names at the C boundary: alone they
// shape the node as those settings do; beside the same setting they are one
// request where the two agree, and refused where they differ.
std::string c_topology(const conccl_device_options& o, std::string* error) {
  conccl_device_t d = nullptr;
  if (conccl_device_open(&o, &d) != CONCCL_OK) {
    *error = conccl_last_error();
    return "";
  }
  size_t need = 0;
  EXPECT_EQ(conccl_device_topology_json(d, nullptr, 0, &need), CONCCL_OK);
  std::string json(need, '\0');
  EXPECT_EQ(conccl_device_topology_json(d, json.data(), json.size(), &need), CONCCL_OK);
  EXPECT_EQ(conccl_device_close(d), CONCCL_OK);
  return json;
}

TEST(BackendSettings, TheCStructsEmuFieldsAreItsSettings) {
  std::string err;
  conccl_device_options f;
  conccl_device_options_init(&f);
  f.preset = "small";
  f.gpus = 3;
  f.engines = 2;
  f.memory_per_gpu = 64ull << 20;
  conccl_device_options s;
  conccl_device_options_init(&s);
  s.settings = "preset=small gpus=3 engines=2 memory_per_gpu=64M";
  const std::string by_fields = c_topology(f, &err), by_settings = c_topology(s, &err);
  ASSERT_NE(by_fields, "") << err;
  ASSERT_NE(by_settings, "") << err;
  EXPECT_EQ(by_fields, by_settings);
  EXPECT_NE(by_fields.find("\"memory_bytes\": 67108864"), std::string::npos) << by_fields;
  conccl_device_options g;
  conccl_device_options_init(&g);
  g.preset = "small";
  g.gen = "5.2";
  EXPECT_NE(c_topology(g, &err).find("\"sdma_generation\": \"5.2\""), std::string::npos) << err;
  // A field beside the setting of the same key: one request if they agree
  // (64M and its bytes included), refused if not.
  s.gpus = 3;
  s.memory_per_gpu = 64ull << 20;
  EXPECT_EQ(c_topology(s, &err), by_settings) << err;
  s.gpus = 4;
  EXPECT_EQ(c_topology(s, &err), "");
  EXPECT_NE(err.find("gpus is given twice"), std::string::npos) << err;
  s.gpus = 0;
  s.memory_per_gpu = 32ull << 20;
  EXPECT_EQ(c_topology(s, &err), "");
  EXPECT_NE(err.find("memory_per_gpu is given twice"), std::string::npos) << err;
  // Another backend does not take the emulator's fields as its settings.
  conccl_device_options n;
  conccl_device_options_init(&n);
  n.backend = "kfd";
  n.gpus = 2;
  n.settings = "traps=off";
  EXPECT_EQ(c_topology(n, &err), "");
  EXPECT_NE(err.find("backend kfd has no setting 'traps'"), std::string::npos) << err;
  EXPECT_EQ(err.find("gpus"), std::string::npos) << err;
}

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
