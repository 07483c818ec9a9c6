"""torch.distributed send/recv on the "conccl" backend: a ring of batch_isend_irecv per size,
through the store (CONCCL_TORCH_P2P=store) and on the DMA engines (=engines), every
received element checked after the warm-up step and after the timed ones. Prints a table and writes JSON.

    python3 tools/bench/torch_p2p_bench.py --nprocs 2 [--device cuda|cpu] [--min 1K] [--max 64M]
        [--iters 20] [--modes store,engines] [--json FILE]

--device cpu runs the emulated node (CONCCL_BACKEND=emu: CPU tensors); cuda the nv backend.
Columns: mode, bytes per rank, us per ring step (every rank sends to the next and receives
from the previous, all waited for), GB/s per rank, wrong elements.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from torch_multinode_bench import parse_size  # this folder: sizes as 64K, 1M, 1.5G


def run(rank, n, args, mode, path, out):
    os.environ["CONCCL_TORCH_P2P"] = mode
    if args.device == "cpu":
        os.environ.setdefault("CONCCL_BACKEND", "emu")
    import torch
    import torch.distributed as dist
    import conccl.torch  # noqa: F401 - registers "conccl"
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("conccl", init_method="file://" + path, rank=rank, world_size=n)
    dev = torch.device(args.device)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    rows = []
    size = args.min
    while size <= args.max:
        k = max(1, size // 4)
        mine = torch.arange(k, dtype=torch.int32, device=dev) * (rank + 1) + rank
        want = torch.arange(k, dtype=torch.int32, device=dev) * (prv + 1) + prv
        got = torch.empty(k, dtype=torch.int32, device=dev)

        def step():
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)]):
                w.wait()
        step()  # warm-up: the pairs' communicators are made here
        if args.device == "cuda":
            torch.cuda.synchronize()
        wrong = int((got != want).sum().item())
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / args.iters
        wrong += int((got != want).sum().item())  # and after the timed steps
        rows.append({"mode": mode, "bytes": k * 4, "us_per_step": us, "gbs": k * 4 / (us * 1e3), "wrong": wrong})
        size *= 4
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--min", type=parse_size, default=1 << 10)
    p.add_argument("--max", type=parse_size, default=64 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--modes", default="store,engines")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    import torch.multiprocessing as mp
    table = []
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "rows.json")
            mp.spawn(run, args=(args.nprocs, args, mode, os.path.join(d, "store"), out), nprocs=args.nprocs)
            with open(out) as f:
                table += json.load(f)
    print("# torch_p2p_bench: %d processes, %s, ring of batch_isend_irecv" % (args.nprocs, args.device))
    print("%-8s %12s %12s %10s %8s" % ("mode", "bytes", "us/step", "GB/s", "#wrong"))
    for r in table:
        print("%-8s %12d %12.2f %10.3f %8d" % (r["mode"], r["bytes"], r["us_per_step"], r["gbs"], r["wrong"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nprocs": args.nprocs, "device": args.device, "rows": table}, f, indent=1)
    return 1 if any(r["wrong"] for r in table) else 0


if __name__ == "__main__":
    sys.exit(main())
