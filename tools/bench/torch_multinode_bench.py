#!/usr/bin/env python3
"""tools/bench/torch_multinode_bench.py - time of the "conccl" backend's ops per call,
on one node or across "nodes" (docs/multinode.md), as a user calls them.

    CONCCL_RANKS_PER_NODE=2 CONCCL_INTER_NODE_BACKEND=gloo PYTHONPATH=python \\
        CONCCL_LIBRARY=<build>/src/libconccl.so python3 tools/bench/torch_multinode_bench.py \\
        --nprocs 4 --sizes 64K,1M,16M --json out.json

N processes (torch.multiprocessing spawn, FileStore rendezvous), CUDA tensors when
CUDA is there (the nv backend, every rank on cuda:0), else CPU tensors on the
emulator. Per op and size (bytes per rank): warm-up calls, then --iters calls back
to back, the time per call from the first to the last completed (the stream
synchronized), the output of the last call checked against its expected values.
Rank 0 prints a table and writes JSON (rows: op, bytes, us_per_call, ok, layout).
"""
import argparse
import json
import os
import sys
import tempfile
import time


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def worker(rank, n, store, args, out):
    import torch
    import torch.distributed as dist
    import conccl.torch  # noqa: F401 - registers "conccl"
    from datetime import timedelta
    cuda = torch.cuda.is_available() and os.environ.get("CONCCL_BACKEND", "nv") != "emu"
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group("conccl", init_method="file://" + store, rank=rank, world_size=n,
                            timeout=timedelta(seconds=120))
    pg = dist.distributed_c10d._get_default_group()
    layout = type(pg).__name__
    if hasattr(pg, "stats") and "nodes" in pg.stats():
        s = pg.stats()
        layout = f"{s['nodes']} nodes x {s['local_size']} ({s['inter_node_backend']} between)"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    rows = []
    for size in [parse_size(x) for x in args.sizes.split(",")]:
        k = max(1, size // 4)  # float32 elements per rank
        ops = {
            "all_gather_into_tensor": (
                lambda: dist.all_gather_into_tensor(ag_out, ag_in),
                lambda: bool(torch.equal(ag_out.view(n, k)[:, 0].cpu(), torch.arange(n, dtype=torch.float32)))),
            "all_reduce": (
                lambda: dist.all_reduce(ar),
                None),
            "reduce_scatter_tensor": (
                lambda: dist.reduce_scatter_tensor(rs_out, rs_in),
                lambda: bool((rs_out.cpu() == float(n)).all())),
        }
        ag_in = torch.full((k,), float(rank), device=dev)
        ag_out = torch.empty(n * k, device=dev)
        rs_in = torch.ones(n * k, device=dev)
        rs_out = torch.empty(k, device=dev)
        for name, (call, check) in ops.items():
            if name == "all_reduce":
                ar = torch.ones(k, device=dev)
            for _ in range(args.warmup):
                call()
            sync()
            dist.barrier()
            if name == "all_reduce":
                ar.fill_(1.0)
            t0 = time.perf_counter()
            for i in range(args.iters):
                if name == "all_reduce" and i == args.iters - 1:
                    ar.fill_(1.0)
                call()
            sync()
            us = (time.perf_counter() - t0) / args.iters * 1e6
            ok = check() if check else bool((ar.cpu() == float(n)).all())
            rows.append({"op": name, "bytes": k * 4, "us_per_call": round(us, 1), "ok": ok, "layout": layout})
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("--sizes", default="64K,1M,16M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="conccl-mnbench-") as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.spawn(worker, args=(args.nprocs, os.path.join(tmp, "store"), args, out), nprocs=args.nprocs, join=True)
        with open(out) as f:
            rows = json.load(f)
    print(f"{'layout':<34} {'op':<24} {'bytes/rank':>11} {'us/call':>10} ok")
    for r in rows:
        print(f"{r['layout']:<34} {r['op']:<24} {r['bytes']:>11} {r['us_per_call']:>10.1f} {r['ok']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nprocs": args.nprocs, "iters": args.iters, "rows": rows}, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
