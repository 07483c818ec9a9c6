// tests/cli/test_cli_args.cpp - sdma-probe's argument parser and value helpers.
#include <gtest/gtest.h>

#include <limits>

#include "cli.hpp"

namespace probe {
namespace {

using conccl::Code;

TEST(ParseSize, PlainAndSuffixed) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("0x1000"), 4096u);
  EXPECT_EQ(parse_size("512B"), 512u);
  EXPECT_EQ(parse_size("4K"), 4096u);
  EXPECT_EQ(parse_size("4k"), 4096u);
  EXPECT_EQ(parse_size("4KiB"), 4096u);
  EXPECT_EQ(parse_size("4KB"), 4096u);
  EXPECT_EQ(parse_size("64M"), 64ull << 20);
  EXPECT_EQ(parse_size("1G"), 1ull << 30);
  EXPECT_EQ(parse_size("3g"), 3ull << 30);
  EXPECT_EQ(parse_size("2T"), 2ull << 40);
  EXPECT_EQ(parse_size("16777215T"), 16777215ull << 40);
}

TEST(ParseSize, Rejects) {
  for (const char* s : {"", "K", "4X", "4KK", "4Kb0", "-1", "+4", "1.5G", "4 K", "0x", "0x1K",
                        "16777216T", "99999999999999999999"})
    EXPECT_FALSE(parse_size(s).has_value()) << s;
}

TEST(ParseInt, DecimalHexNegative) {
  EXPECT_EQ(parse_uint("42"), 42u);
  EXPECT_EQ(parse_uint("0xff"), 255u);
  EXPECT_EQ(parse_uint("0XFF"), 255u);
  EXPECT_EQ(parse_uint("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(parse_uint("18446744073709551616").has_value());
  EXPECT_FALSE(parse_uint("-1").has_value());
  EXPECT_FALSE(parse_uint("1x").has_value());
  EXPECT_FALSE(parse_uint("").has_value());
  EXPECT_EQ(parse_int("-5"), -5);
  EXPECT_EQ(parse_int("-0x10"), -16);
  EXPECT_EQ(parse_int("-9223372036854775808"), INT64_MIN);
  EXPECT_FALSE(parse_int("9223372036854775808").has_value());
  EXPECT_FALSE(parse_int("--1").has_value());
}

TEST(FormatSize, Units) {
  EXPECT_EQ(format_size(17), "17 B");
  EXPECT_EQ(format_size(4096), "4 KiB");
  EXPECT_EQ(format_size(1536ull << 10), "1.5 MiB");
  EXPECT_EQ(format_size(1ull << 30), "1 GiB");
}

TEST(JsonString, Escapes) {
  EXPECT_EQ(json_string("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
}

TEST(JsonNumber, NeverInfOrNan) {
  EXPECT_EQ(json_number(1.5, 3), "1.500");
  EXPECT_EQ(json_number(0, 4), "0.0000");
  EXPECT_EQ(json_number(-2.25, 1), "-2.2");
  // A zero time gives an infinite bandwidth; 0/0 a NaN: JSON has neither.
  EXPECT_EQ(json_number(1.0 / 0.0 * 1e9, 4), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity(), 4), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::quiet_NaN(), 3), "null");
}

TEST(ExitCodes, FromLibraryCodes) {
  EXPECT_EQ(exit_code_for(Code::ok), ExitCode::ok);
  EXPECT_EQ(exit_code_for(Code::verify_failed), ExitCode::verify_failed);
  EXPECT_EQ(exit_code_for(Code::invalid_argument), ExitCode::usage);
  EXPECT_EQ(exit_code_for(Code::out_of_range), ExitCode::usage);
  EXPECT_EQ(exit_code_for(Code::not_found), ExitCode::usage);
  EXPECT_EQ(exit_code_for(Code::timeout), ExitCode::timeout);
  EXPECT_EQ(exit_code_for(Code::device_fault), ExitCode::fault);
  EXPECT_EQ(exit_code_for(Code::resource_exhausted), ExitCode::fault);
  EXPECT_EQ(exit_code_for(Code::busy), ExitCode::fault);
  EXPECT_EQ(exit_code_for(Code::internal), ExitCode::fault);
  EXPECT_EQ(exit_code_for(Code::unavailable), ExitCode::unavailable);
  EXPECT_EQ(to_int(ExitCode::unavailable), 5);
}

std::vector<FlagSpec> specs() {
  std::vector<FlagSpec> s = {
      {.name = "size", .value = "BYTES"},
      {.name = "peer", .value = "N", .repeatable = true},
      {.name = "verbose"},
  };
  s.insert(s.end(), common_flags().begin(), common_flags().end());
  return s;
}

TEST(Args, FlagsValuesAndPositionals) {
  conccl::Result<Args> a = Args::parse(
      "t", {"in.txt", "--size", "4K", "--peer=1", "-", "--peer", "3", "--verbose", "--", "--x"},
      specs());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->command(), "t");
  EXPECT_EQ(a->positionals(), (std::vector<std::string>{"in.txt", "-", "--x"}));
  EXPECT_TRUE(a->has("verbose"));
  EXPECT_FALSE(a->has("json"));
  EXPECT_EQ(a->value("size"), "4K");
  EXPECT_EQ(*a->get_size("size"), std::optional<uint64_t>(4096));
  EXPECT_EQ(a->values("peer"), (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(a->value("peer"), "3");
  EXPECT_EQ(*a->get_uint("peer"), std::optional<uint64_t>(3));
  EXPECT_EQ(*a->get_uint("absent", 7), 7u);
  EXPECT_EQ(*a->get_size("absent", 1), 1u);
  EXPECT_EQ(a->common().backend, Backend::emu);
  EXPECT_FALSE(a->common().backend_given);
  EXPECT_EQ(a->common().timeout_ms, kDefaultTimeoutMs);
}

TEST(Args, TypedGetterErrorsNameTheFlag) {
  conccl::Result<Args> a = Args::parse("t", {"--size", "4Q", "--peer", "x"}, specs());
  ASSERT_TRUE(a.ok());
  conccl::Result<std::optional<uint64_t>> s = a->get_size("size");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::invalid_argument);
  EXPECT_NE(s.status().message().find("--size '4Q'"), std::string::npos);
  EXPECT_FALSE(a->get_int("peer").ok());
  EXPECT_FALSE(a->get_double("peer").ok());
}

TEST(Args, IntInRangeNeverNarrows) {
  // Values that an int or a uint64 cast would wrap into range.
  for (const char* v : {"4294967296", "4294967297", "18446744073709551615", "18446744073709551616",
                        "99999999999999999999999", "-1", "-4294967296", "-9223372036854775808",
                        "0xFFFFFFFFFFFFFFFF", "0x100000000", "64"}) {
    conccl::Result<Args> a = Args::parse("t", {"--size", v}, specs());
    ASSERT_TRUE(a.ok());
    conccl::Result<std::optional<int64_t>> r = a->get_int_in_range("size", 0, 63);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_EQ(r.status().code(), Code::invalid_argument);
    EXPECT_EQ(r.status().message(), "--size " + std::string(v) + " is out of range: give 0..63");
  }
  for (const char* v : {"abc", "1K", "1.5", "", "0x", "--1", "1e3"}) {
    conccl::Result<Args> a = Args::parse("t", {"--size=" + std::string(v)}, specs());
    ASSERT_TRUE(a.ok());
    conccl::Result<std::optional<int64_t>> r = a->get_int_in_range("size", 0, 63);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_NE(r.status().message().find("is not an integer (give 0..63"), std::string::npos)
        << r.status().message();
  }
  conccl::Result<Args> a = Args::parse("t", {"--size", "0x3f", "--peer", "-2"}, specs());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a->get_int_in_range("size", 0, 63), std::optional<int64_t>(63));
  EXPECT_EQ(*a->get_int_in_range("peer", -2, 2), std::optional<int64_t>(-2));
  EXPECT_EQ(*a->get_int_in_range("absent", 1, 8), std::optional<int64_t>());
  EXPECT_EQ(*a->get_int_in_range("absent", 1, 8, 0), 0);
}

TEST(Args, SharedFlags) {
  conccl::Result<Args> a = Args::parse(
      "t", {"--backend=nv", "--preset", "small", "--json", "--timeout-ms", "0x10"}, specs());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->common().backend, Backend::nv);
  EXPECT_TRUE(a->common().backend_given);
  EXPECT_EQ(a->common().preset, "small");
  EXPECT_TRUE(a->common().json);
  EXPECT_EQ(a->common().timeout_ms, 16u);
  EXPECT_TRUE(a->common().timeout_given);
  a = Args::parse("t", {"--timeout-ms", "86400000"}, specs());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->common().timeout_ms, 86400000u);
  EXPECT_EQ(backend_name(Backend::kfd), "kfd");
}

TEST(Args, Errors) {
  struct Case {
    std::vector<std::string> argv;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--nope"}, "unknown flag --nope"},
           {{"-n"}, "unknown option '-n'"},
           {{"--size"}, "--size needs a value (BYTES)"},
           {{"--size", "1", "--size=2"}, "--size given more than once"},
           {{"--verbose=1"}, "--verbose takes no value"},
           {{"--backend", "rocm"}, "--backend 'rocm' is not one of emu, kfd, nv"},
           {{"--timeout-ms", "-1"}, "--timeout-ms -1 is out of range: give 1..86400000"},
           {{"--timeout-ms", "0"}, "--timeout-ms 0 would fail every wait at once"},
           {{"--timeout-ms", "0x0"}, "--timeout-ms 0 would fail every wait at once"},
           {{"--timeout-ms", "86400001"}, "--timeout-ms 86400001 is out of range: give 1..86400000"},
           {{"--timeout-ms", "10000000000000"}, "out of range: give 1..86400000"},
           {{"--timeout-ms", "18446744073709551615"}, "out of range: give 1..86400000"},
           {{"--preset="}, "--preset needs a name"},
       }) {
    conccl::Result<Args> a = Args::parse("t", c.argv, specs());
    ASSERT_FALSE(a.ok()) << c.message;
    EXPECT_EQ(a.status().code(), Code::invalid_argument);
    EXPECT_NE(a.status().message().find(c.message), std::string::npos)
        << a.status().message() << " vs " << c.message;
  }
  // A repeated switch is harmless.
  EXPECT_TRUE(Args::parse("t", {"--verbose", "--verbose"}, specs()).ok());
}

// One-letter aliases (nccl-tests' -d float, -b 1K): "-X VALUE" and "-XVALUE"
// are the long flag; an unknown letter or a missing value is an error that
// names the aliases.
TEST(Args, ShortNames) {
  const std::vector<FlagSpec> s = {{.name = "dtype", .value = "TYPE", .short_name = 'd'},
                                   {.name = "min", .value = "SIZE", .short_name = 'b'},
                                   {.name = "verbose"},
                                   {.name = "backend", .value = "B"},
                                   {.name = "preset", .value = "P"},
                                   {.name = "json"},
                                   {.name = "timeout-ms", .value = "N"}};
  conccl::Result<Args> a = Args::parse("t", {"-d", "half", "-b4K", "x"}, s);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->value("dtype"), std::optional<std::string>("half"));
  EXPECT_EQ(*a->get_size("min", 0), 4096u);
  EXPECT_EQ(a->positionals(), std::vector<std::string>{"x"});
  for (const auto& [argv, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"-q", "1"}, "unknown option '-q' (flags are spelled --name, or -d (--dtype), -b (--min);"},
           {{"-d"}, "-d (--dtype) needs a value (TYPE)"},
           {{"-d", "f32", "--dtype=half"}, "--dtype given more than once"},
           {{"--dtype", "f32", "-dhalf"}, "--dtype given more than once (-d is the same flag)"},
       }) {
    conccl::Result<Args> bad = Args::parse("t", argv, s);
    ASSERT_FALSE(bad.ok()) << message;
    EXPECT_NE(bad.status().message().find(message), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace probe
