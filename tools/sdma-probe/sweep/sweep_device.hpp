// tools/sdma-probe/sweep_device.hpp - what every size sweep sets up the same
// way on its device: where the ranks run, one stager per GPU, and the
// communicator (every rank in this process, or this --procs rank's).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "cli.hpp"
#include "conccl/collectives.hpp"
#include "conccl/device.hpp"
#include "conccl/staging.hpp"
#include "sweep/sweep_flags.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {

struct SweepDevice {
  std::unique_ptr<conccl::Device> dev;
  int gpus = 0;             // the GPUs the ranks use (--gpus N: the first N)
  int n = 0;                // ranks
  std::vector<int> gpu_of;  // each rank's GPU: round robin
  bool loopback() const { return n > gpus; }  // several ranks on a GPU
};

// Installs the sweep's signal handlers (sweep_signal.hpp), opens the device
// (a --procs rank at its process slot) and places the ranks: --procs N,
// --ranks N or one per GPU. `check_ranks` (the command's) refuses a rank
// count before any is placed. `out` keeps the device even on an error, so
// that it is closed after the message.
conccl::Status open_sweep_device(const Args& args, const SweepFlags& f, const SweepProcs& p,
                                 const std::function<conccl::Status(int n)>& check_ranks, SweepDevice* out);

// One stager per GPU moves the data in and the results out: device memory
// need not be CPU-visible (NVIDIA HBM is not). A --procs rank has its own
// GPU's only (nullptr for the others'). `out` keeps those made before an error.
conccl::Status make_stagers(const SweepDevice& d, int me, std::vector<std::unique_ptr<conccl::Stager>>* out);

// The communicator: every rank in this process, or (--procs) rank `me`,
// which joins the others within --timeout-ms. `co` gets loopback and, in a
// rank, its GPU.
conccl::Result<std::unique_ptr<conccl::Communicator>> create_sweep_communicator(const Args& args,
                                                                               const SweepDevice& d,
                                                                               const SweepProcs& p,
                                                                               conccl::Communicator::Options co);

// What the banner (and the JSON) says that every sweep knows the same way:
// the command `op`, backend and preset, ranks, GPUs and loopback, engines per
// GPU, --queues, --procs and windows, the iterations, the sizes and --root.
SweepSetup common_setup(const Args& args, const char* op, const SweepDevice& d, const SweepFlags& f,
                        const SweepProcs& p, bool windows, const std::string& queues);

}  // namespace probe
