// tools/sdma-probe/sweep_json.hpp - the sweeps' JSON: where it goes (`--json`
// alone: stdout instead of the table; `--json FILE`, `--json=FILE`,
// `--json-file FILE`: a file, the table still on stdout) and what it says
// (docs/sdma-probe.md). Shared by the copy collectives and the reductions.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {

// Where the rows go: `file` (opened by JsonFile::open) and/or stdout.
struct JsonTarget {
  std::optional<std::string> file;
  bool to_stdout = false;  // JSON on stdout instead of the table
};
// From --json, --json-file and the one positional `--json FILE` leaves
// (the shared --json is a switch, so FILE arrives as a positional); "-" is
// stdout. A usage error for any other positional.
conccl::Result<JsonTarget> json_target(const Args& args);

// --json FILE: opened before the sweep (a path that cannot be written is a
// usage error up front), every write and the close checked.
class JsonFile {
 public:
  static conccl::Result<JsonFile> open(const std::string& path);
  FILE* get() const { return f_.get(); }
  const std::string& path() const { return path_; }
  // Flushes and closes; the first error (errno) of a write, the flush or the
  // close as text, or "" when every byte reached the file. `write_errno`: the
  // first error the writer saw (0: none).
  std::string close(int write_errno);

 private:
  struct Closer {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<FILE, Closer> f_;
};

// Writes the sweep as JSON; returns the errno of the first write that
// failed, or 0 (the stream's buffer may still hold the end: flush and check
// it). `signal`: the signal that interrupted the sweep (0: none).
// Reductions (setup.reduction) add "redop", "dtype", "root", "ordering" and
// "staging_bytes", and per row "redop", "root" and "pieces", and count
// "wrong_elements" where the copy collectives count "wrong_bytes".
int write_sweep_json(FILE* f, const SweepSetup& setup, const std::vector<SweepRow>& rows, int signal);

}  // namespace probe
