// tools/sdma-probe/sweep_json.cpp - see sweep_json.hpp.
#include "sweep/sweep_json.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "sweep/sweep_signal.hpp"

namespace probe {

conccl::Result<JsonTarget> json_target(const Args& args) {
  JsonTarget t;
  t.file = args.value("json-file");
  t.to_stdout = args.common().json;
  if (!args.positionals().empty()) {
    if (!args.common().json || args.positionals().size() != 1 || t.file)
      return conccl::error(conccl::Code::invalid_argument,
                           "unexpected argument '" + args.positionals()[0] + "' (only --json FILE takes one)");
    t.file = args.positionals()[0];
    t.to_stdout = false;
  }
  // `--json -` (and --json-file -): JSON on stdout, as `--json` alone, not a
  // file named "-".
  if (t.file && *t.file == "-") {
    t.file.reset();
    t.to_stdout = true;
  }
  return t;
}

conccl::Result<JsonFile> JsonFile::open(const std::string& path) {
  JsonFile j;
  j.path_ = path;
  j.f_.reset(std::fopen(path.c_str(), "w"));
  if (!j.f_)
    return conccl::error(conccl::Code::invalid_argument,
                         "--json: cannot write '" + path + "': " + std::strerror(errno) +
                             " (give a file in a writable directory, or - for stdout)");
  return j;
}

std::string JsonFile::close(int write_errno) {
  int err = write_errno;
  if (std::fflush(f_.get()) != 0 && !err) err = errno;
  const bool failed = std::ferror(f_.get()) != 0;
  if (std::fclose(f_.release()) != 0 && !err) err = errno;
  if (err) return std::strerror(err);
  return failed ? "a write failed" : "";
}

namespace {

// The in-place measurement of a row as a JSON object, or null.
std::string in_place_json(const SweepRow& r, const char* wrong_key) {
  if (!r.in_place) return "null";
  return "{\"time_us\": " + json_number(r.ip_time.mean, 3) + ", \"algbw_gbps\": " + json_number(r.ip_algbw, 4) +
         ", \"busbw_gbps\": " + json_number(r.ip_busbw, 4) + ", \"" + wrong_key + "\": " + std::to_string(r.ip_wrong) +
         ", \"min_us\": " + json_number(r.ip_time.min, 3) + ", \"max_us\": " + json_number(r.ip_time.max, 3) +
         ", \"stddev_us\": " + json_number(r.ip_time.stddev, 3) + ", \"variant\": \"" + r.ip_variant +
         "\", \"bootstrap_messages_per_call\": " +
         (r.ip_messages_per_call < 0 ? std::string("null") : json_number(r.ip_messages_per_call, 3)) + "}";
}

}  // namespace

int write_sweep_json(FILE* f, const SweepSetup& setup, const std::vector<SweepRow>& rows, int signal) {
  int err = 0;
  auto check = [&](int printed) {
    if (printed < 0 && !err) err = errno ? errno : EIO;
  };
  const char* wrong_key = setup.reduction ? "wrong_elements" : "wrong_bytes";
  check(std::fprintf(f, "{\"op\": \"%s\", \"backend\": \"%s\", \"emulated\": %s, \"ranks\": %d, \"gpus\": %d, "
                  "\"loopback\": %s, \"prelaunch\": %s, \"queues\": \"%s\", \"variant_asked\": \"%s\", "
                  "\"iters\": %" PRId64 ", \"warmup\": %" PRId64 ", \"step_factor\": %" PRIu64 ", "
                  "\"interrupted\": %s, ",
               setup.op.c_str(), setup.backend.c_str(), setup.emulated ? "true" : "false", setup.ranks, setup.gpus,
               setup.loopback ? "true" : "false", setup.prelaunch ? "true" : "false", setup.queues.c_str(),
               setup.variant.c_str(), setup.iters, setup.warmup, setup.step_factor,
               signal ? json_string(sweep_signal_name(signal)).c_str() : "null"));
  if (setup.reduction)
    check(std::fprintf(f, "\"redop\": %s, \"dtype\": %s, \"root\": %s, \"ordering\": %s, \"staging_bytes\": %" PRIu64 ", ",
                       json_string(setup.redop).c_str(), json_string(setup.dtype).c_str(),
                       setup.has_root ? std::to_string(setup.root).c_str() : "null",
                       json_string(setup.ordering).c_str(), setup.staging));
  check(std::fprintf(f, "\"rows\": ["));
  for (size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    check(std::fprintf(f,
                 "%s\n  {\"size\": %" PRIu64 ", \"time_us\": %s, \"algbw_gbps\": %s, \"busbw_gbps\": %s, "
                 "\"verified\": %s, \"%s\": %" PRIu64 ", \"variant\": \"%s\", \"count\": %" PRIu64
                 ", \"type\": \"%s\", ",
                 i ? "," : "", r.size, json_number(r.time.mean, 3).c_str(), json_number(r.algbw, 4).c_str(),
                 json_number(r.busbw, 4).c_str(), r.wrong == 0 ? "true" : "false", wrong_key,
                 r.wrong, r.variant.c_str(), r.count, r.type.c_str()));
    if (setup.reduction)
      check(std::fprintf(f, "\"redop\": %s, \"root\": %d, \"pieces\": %" PRIu64 ", ", json_string(r.redop).c_str(),
                         r.root, r.pieces));
    check(std::fprintf(f,
                 "\"engines\": %d, \"iters\": %" PRIu64
                 ", \"min_us\": %s, \"max_us\": %s, \"stddev_us\": %s, \"in_place\": %s, "
                 "\"bootstrap_messages_per_call\": %s}",
                 r.engines, r.iters, json_number(r.time.min, 3).c_str(), json_number(r.time.max, 3).c_str(),
                 json_number(r.time.stddev, 3).c_str(), in_place_json(r, wrong_key).c_str(),
                 r.messages_per_call < 0 ? "null" : json_number(r.messages_per_call, 3).c_str()));
  }
  const double messages = messages_per_call(rows);
  check(std::fprintf(f, "\n], \"windows\": %s, \"bootstrap_messages_per_call\": %s}\n", setup.windows ? "true" : "false",
                     messages < 0 ? "null" : json_number(messages, 3).c_str()));
  return err;
}

}  // namespace probe
