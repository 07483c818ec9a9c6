"""torch.distributed send/recv on the "conccl" backend: a ring of batch_isend_irecv per size,
through the store (CONCCL_TORCH_P2P=store) and on the DMA engines (=engines), every
received element checked after the warm-up step and after the timed ones. Prints a table and writes JSON.

    python3 tools/bench/torch_p2p_bench.py --nprocs 2 [--device cuda|cpu] [--min 1K] [--max 64M]
        [--iters 20] [--modes store,engines] [--pattern ring|oneway] [--json FILE]

--device cpu runs the emulated node (CONCCL_BACKEND=emu: CPU tensors); cuda the nv backend.
--pattern ring (default): every rank sends to the next and receives from the previous;
oneway: even ranks send to the next rank, which receives (one ordered pair each, one
direction: the receiver's times are reported).
Columns: mode, bytes per rank, us per step (all waited for), GB/s per rank, wrong
elements, and, for the engines, the median host time of one pair transfer's broadcast
call (us_bcast: the pair thread's call into ConCCL; on CUDA it only enqueues).
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
    bcast = []  # host seconds of each pair broadcast (the engines' transfers)
    if mode == "engines":
        import conccl
        plain = conccl.Communicator.broadcast

        def timed(self, *a, **kw):
            t = time.perf_counter()
            try:
                return plain(self, *a, **kw)
            finally:
                bcast.append(time.perf_counter() - t)
        conccl.Communicator.broadcast = timed
    dist.init_process_group("conccl", init_method="file://" + path, rank=rank, world_size=n)
    dev = torch.device(args.device)
    oneway = args.pattern == "oneway"
    if oneway and n % 2:
        raise SystemExit("--pattern oneway: give an even --nprocs (pairs 0->1, 2->3, ...)")
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    reporter = 1 if oneway else 0
    rows = []
    size = args.min
    while size <= args.max:
        k = max(1, size // 4)
        mine = torch.arange(k, dtype=torch.int32, device=dev) * (rank + 1) + rank
        want = torch.arange(k, dtype=torch.int32, device=dev) * (prv + 1) + prv
        got = torch.empty(k, dtype=torch.int32, device=dev)

        def step():
            if oneway:
                ops = [dist.P2POp(dist.isend, mine, nxt)] if rank % 2 == 0 else [dist.P2POp(dist.irecv, got, prv)]
            else:
                ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        step()  # warm-up: the pairs' communicators are made here
        if args.device == "cuda":
            torch.cuda.synchronize()
        wrong = int((got != want).sum().item())
        dist.barrier()
        del bcast[:]
        t0 = time.perf_counter()
        for _ in range(args.iters):
            step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / args.iters
        if oneway and rank % 2 == 0:
            wrong = 0  # a sender receives nothing
        else:
            wrong += int((got != want).sum().item())  # and after the timed steps
        ts = sorted(bcast)
        rows.append({"mode": mode, "pattern": args.pattern, "bytes": k * 4, "us_per_step": us,
                     "gbs": k * 4 / (us * 1e3), "wrong": wrong,
                     "us_bcast": ts[len(ts) // 2] * 1e6 if ts else None})
        size *= 4
    if rank == reporter:
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
    p.add_argument("--pattern", choices=("ring", "oneway"), default="ring")
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
    what = "ring of batch_isend_irecv" if args.pattern == "ring" else "one direction per pair"
    print("# torch_p2p_bench: %d processes, %s, %s" % (args.nprocs, args.device, what))
    print("%-8s %12s %12s %10s %8s %10s" % ("mode", "bytes", "us/step", "GB/s", "#wrong", "us_bcast"))
    for r in table:
        b = "%10.2f" % r["us_bcast"] if r["us_bcast"] is not None else "%10s" % "-"
        print("%-8s %12d %12.2f %10.3f %8d %s" % (r["mode"], r["bytes"], r["us_per_step"], r["gbs"], r["wrong"], b))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nprocs": args.nprocs, "device": args.device, "pattern": args.pattern, "rows": table}, f, indent=1)
    return 1 if any(r["wrong"] for r in table) else 0


if __name__ == "__main__":
    sys.exit(main())
