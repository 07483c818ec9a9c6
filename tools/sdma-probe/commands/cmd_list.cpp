// tools/sdma-probe/cmd_list.cpp - `sdma-probe list`: GPUs, engines and links.
#include <cstdio>

#include "cli.hpp"
#include "conccl/topology.hpp"
#include "device_flags.hpp"

namespace probe {
namespace {

int run_list(const Args& args, Context& ctx) {
  if (!args.positionals().empty()) return usage_error(args, ctx, "list takes no arguments");
  conccl::Result<std::unique_ptr<conccl::Device>> dev = open_device_from_args(args);
  if (!dev.ok()) return fail(args, ctx, dev.status());
  const conccl::Topology& t = (*dev)->topology();
  std::fputs(args.common().json ? conccl::topology_json(t).c_str() : conccl::topology_table(t).c_str(), ctx.out);
  return to_int(ExitCode::ok);
}

const Registration list_reg({
    .name = "list",
    .summary = "list GPUs, SDMA generation, engines (pcie|xgmi) and links with recommended engines",
    .usage = "sdma-probe list [--backend emu|kfd|nv] [--preset P] [--gpus N] [--engines K] [--json]",
    .details =
        "The table shows each GPU, its SDMA generation and engines, and each link to a\n"
        "peer with the engines recommended for copies to it. --json prints\n"
        "{\"backend\", \"preset\", \"gpus\": [{\"index\", \"name\", \"isa\", \"sdma_generation\", \"memory_bytes\",\n"
        " \"per_queue_bytes\" (KFD by-engine-id: the CWSR area each queue costs),\n"
        " \"engines\": [{\"id\", \"kind\"}], \"links\": [{\"peer\", \"type\", \"weight\", \"recommended_engines\"}]}],\n"
        " \"notes\": [backend remarks]}.\n"
        "Emulator presets: mi300x (default; 8 GPUs x 16 engines), small (2 GPUs x 4 engines).\n",
    .flags = device_flag_specs(),
    .run = run_list,
    .order = 10,
});

}  // namespace
}  // namespace probe
