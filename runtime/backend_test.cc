// Backend specs, the registry, and the backends built from specs.
#include "runtime/backend.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;

TEST(BackendSpecTest, ParsesCountsAndConfig) {
  auto specs = ParseBackendSpecs("cpu:2, tpu:8,null", "tpu.hbm_bytes=1G,cpu.memory_bytes=64M");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].kind, "cpu");
  EXPECT_EQ((*specs)[0].count, 2);
  EXPECT_EQ((*specs)[0].config.at("memory_bytes"), "64M");
  EXPECT_EQ((*specs)[1].kind, "tpu");
  EXPECT_EQ((*specs)[1].count, 8);
  EXPECT_EQ((*specs)[1].config.at("hbm_bytes"), "1G");
  EXPECT_EQ((*specs)[2].kind, "null");
  EXPECT_EQ((*specs)[2].count, 1);
  EXPECT_TRUE((*specs)[2].config.empty());
}

TEST(BackendSpecTest, RejectsMalformedItemsNamingThem) {
  struct Case {
    const char* devices;
    const char* config;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"cpu:0", "", "'cpu:0': the count must be a positive integer"},
           {"cpu:x", "", "'cpu:x': the count must be a positive integer"},
           {"cpu:-1", "", "'cpu:-1'"},
           {":2", "", "':2' has no kind"},
           {"cpu,cpu:2", "", "'cpu' appears twice"},
           {"", "", "no backend named"},
           {"cpu", "tpu.hbm_bytes=1G", "configures 'tpu', which devices does not name"},
           {"cpu", "memory_bytes=1G", "'memory_bytes=1G' is not kind.key=value"},
           {"cpu", "cpu.=1", "is not kind.key=value"},
       }) {
    auto specs = ParseBackendSpecs(c.devices, c.config);
    ASSERT_FALSE(specs.ok()) << c.devices << " / " << c.config;
    EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(specs.status().message(), HasSubstr(c.message));
  }
}

TEST(BackendSpecTest, ByteCountsTakeBinarySuffixes) {
  BackendSpec spec{"cpu", 1, {{"a", "1048576"}, {"b", "64M"}, {"c", "2g"}, {"d", "12x"},
                              {"e", "-1"}, {"f", "99999999T"}}};
  EXPECT_EQ(*ConfigBytes(spec, "a", 0), 1048576);
  EXPECT_EQ(*ConfigBytes(spec, "b", 0), int64_t{64} << 20);
  EXPECT_EQ(*ConfigBytes(spec, "c", 0), int64_t{2} << 30);
  EXPECT_EQ(*ConfigBytes(spec, "absent", 7), 7);
  for (const char* bad : {"d", "e", "f"}) {
    auto v = ConfigBytes(spec, bad, 0);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_THAT(v.status().message(), HasSubstr("is not a byte count"));
  }
}

TEST(BackendRegistryTest, EveryBuiltBackendIsRegistered) {
  RegisterBuiltinBackends();
  RegisterBuiltinBackends();  // idempotent
  std::vector<std::string> kinds;
  for (const BackendInfo& b : RegisteredBackends()) {
    kinds.push_back(b.kind);
    EXPECT_FALSE(b.summary.empty()) << b.kind;
    EXPECT_TRUE(b.factory) << b.kind;
  }
  EXPECT_THAT(kinds, ::testing::IsSupersetOf({"cpu", "null", "tpu"}));
}

// "auto" takes the CPU and every device of the accelerator backends that
// the host has: a kind whose host has none is left out.
TEST(BackendRegistryTest, AutoDevicesAddTheAcceleratorsTheHostHas) {
  RegisterBuiltinBackends();
  BackendInfo present{"fakeaccel", "an accelerator with two devices", "none",
                      [](const BackendSpec&) -> absl::StatusOr<std::unique_ptr<Backend>> {
                        return absl::UnimplementedError("not built in tests");
                      },
                      [] { return 2; }};
  BackendInfo absent = present;
  absent.kind = "missingaccel";
  absent.count_devices = [] { return 0; };
  RegisterBackend(present);
  RegisterBackend(absent);
  const std::string devices = AutoDevices();
  EXPECT_TRUE(absl::StartsWith(devices, "cpu:1")) << devices;
  EXPECT_THAT(devices, HasSubstr(",fakeaccel:2"));
  EXPECT_THAT(devices, ::testing::Not(HasSubstr("missingaccel")));
  auto specs = ParseBackendSpecs(" auto ", "");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_GE(specs->size(), 2u);
  EXPECT_EQ((*specs)[0].kind, "cpu");
  EXPECT_EQ((*specs)[0].count, 1);
  bool found = false;
  for (const BackendSpec& s : *specs) found = found || (s.kind == "fakeaccel" && s.count == 2);
  EXPECT_TRUE(found);
}

TEST(BackendRegistryTest, UnknownKindsAndBadConfigsAreClearErrors) {
  RegisterBuiltinBackends();
  auto unknown = CreateBackend({"quantum", 1, {}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("no backend of kind 'quantum'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("cpu"));

  auto zero = CreateBackend({"cpu", 0, {}});
  EXPECT_THAT(zero.status().message(), HasSubstr("at least 1"));
  auto typo = CreateBackend({"cpu", 1, {{"memory", "1G"}}});
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(),
              HasSubstr("cpu backend: unknown config key 'memory' (cpu takes memory_bytes)"));
  auto too_many = CreateBackend({"tpu", 9, {}});
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("has 8 cores, not 9"));
  auto bad_field = CreateBackend({"tpu", 1, {{"clock_hz", "fast"}}});
  ASSERT_FALSE(bad_field.ok());
  EXPECT_THAT(bad_field.status().message(), HasSubstr("clock_hz"));
  auto missing_file = CreateBackend({"tpu", 1, {{"config", "/nonexistent.cfg"}}});
  EXPECT_EQ(missing_file.status().code(), absl::StatusCode::kNotFound);
}

TEST(BackendRegistryTest, SpecsShapeTheDevices) {
  RegisterBuiltinBackends();
  auto cpu = CreateBackend({"cpu", 2, {{"memory_bytes", "1M"}}});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_EQ((*cpu)->devices().size(), 2u);
  EXPECT_EQ((*cpu)->devices()[1]->name(), "cpu:1");
  EXPECT_EQ((*cpu)->devices()[1]->kind(), "cpu");
  EXPECT_EQ((*cpu)->devices()[1]->memory_stats().capacity_bytes, 1 << 20);

  auto tpu = CreateBackend({"tpu", 2, {{"hbm_bytes", "2M"}}});
  ASSERT_TRUE(tpu.ok()) << tpu.status();
  EXPECT_EQ((*tpu)->devices()[1]->name(), "tpu:1");
  EXPECT_EQ((*tpu)->devices()[0]->memory_stats().capacity_bytes, 2 << 20);
  EXPECT_THAT((*tpu)->Describe(), HasSubstr("2 cores of a TPU v3-8"));
}

TEST(BackendRegistryTest, ConfigKeysSeparateWhatCompilesDifferently) {
  RegisterBuiltinBackends();
  // Memory sizes change no code: one cache entry serves both.
  auto small = CreateBackend({"cpu", 1, {{"memory_bytes", "1M"}}});
  auto large = CreateBackend({"cpu", 1, {{"memory_bytes", "1G"}}});
  EXPECT_EQ((*small)->config_key(), (*large)->config_key());
  // A chip with another clock prices programs differently.
  auto v3 = CreateBackend({"tpu", 1, {}});
  auto fast = CreateBackend({"tpu", 1, {{"clock_hz", "1.5e9"}}});
  EXPECT_NE((*v3)->config_key(), (*fast)->config_key());
  EXPECT_THAT((*fast)->config_key(), HasSubstr("clock_hz = 1.5e+09"));
}

}  // namespace
}  // namespace kiln::runtime
