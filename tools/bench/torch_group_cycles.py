"""A program that makes and destroys its "conccl" groups again and again, as test
fixtures and elastic restarts do: each cycle init_process_group, an all_reduce (the
reduction staging), an all_gather_into_tensor, a ring of send/recv (a pair
communicator each) and a sub-group's all_reduce, every element checked, then
destroy_process_group. Prints, per cycle, the GPU memory CUDA reports free
(torch.cuda.mem_get_info) and what torch's caching allocator holds; a group whose
device memory outlived it shows as free memory falling by ~130 MiB a cycle.
Writes JSON with --json.

    python3 tools/bench/torch_group_cycles.py --nprocs 2 [--cycles 10] [--device cuda|cpu] [--json FILE]

--device cpu runs the emulated node (CONCCL_BACKEND=emu: CPU tensors; no memory column).
"""
import argparse
import json
import os
import sys
import tempfile
from datetime import timedelta


def run(rank, n, args, tmp, out):
    if args.device == "cpu":
        os.environ.setdefault("CONCCL_BACKEND", "emu")
    import torch
    import torch.distributed as dist
    import conccl.torch  # noqa: F401 - registers "conccl"
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(0)
    dev = "cuda" if cuda else "cpu"
    rows, wrong = [], 0
    for k in range(args.cycles):
        dist.init_process_group("conccl", init_method=f"file://{tmp}/store.{k}", rank=rank, world_size=n,
                                timeout=timedelta(seconds=60))
        g = torch.Generator().manual_seed(1000 * k + 7)
        ins = [torch.randn(4099, generator=g).to(dev) for _ in range(n)]
        t = ins[rank].clone()
        dist.all_reduce(t)
        want = ins[0].clone()
        for x in ins[1:]:
            want += x
        wrong += int((t != want).sum())
        out_t = torch.empty(n * 4099, device=dev)
        dist.all_gather_into_tensor(out_t, ins[rank])
        wrong += int((out_t != torch.cat(ins)).sum())
        got = torch.empty(4099, device=dev)
        ops = [dist.P2POp(dist.isend, ins[rank], (rank + 1) % n), dist.P2POp(dist.irecv, got, (rank - 1) % n)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        wrong += int((got != ins[(rank - 1) % n]).sum())
        if n > 1:
            sub = dist.new_group(list(range(1, n)))
            if rank:
                u = ins[rank].clone()
                dist.all_reduce(u, group=sub)
                want = ins[1].clone()
                for x in ins[2:]:
                    want += x
                wrong += int((u != want).sum())
        dist.destroy_process_group()
        row = {"cycle": k, "wrong": wrong}
        if cuda:
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            row.update(free_mib=free >> 20, torch_reserved_mib=torch.cuda.memory_reserved() >> 20)
        rows.append(row)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="conccl-cycles-") as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.spawn(run, args=(args.nprocs, args, tmp, out), nprocs=args.nprocs)
        with open(out) as f:
            rows = json.load(f)
    print(f"# {args.nprocs} processes, {args.cycles} cycles of init_process_group('conccl') ... destroy_process_group")
    print("cycle  wrong" + ("  free_MiB  torch_reserved_MiB" if args.device == "cuda" else ""))
    for r in rows:
        print(f"{r['cycle']:5d}  {r['wrong']:5d}" +
              (f"  {r['free_mib']:8d}  {r['torch_reserved_mib']:18d}" if "free_mib" in r else ""))
    drop = rows[1]["free_mib"] - rows[-1]["free_mib"] if len(rows) > 1 and "free_mib" in rows[0] else None
    if drop is not None:
        print(f"# free memory from cycle 1 to the last: {-drop:+d} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nprocs": args.nprocs, "cycles": args.cycles, "device": args.device, "rows": rows,
                       "free_mib_lost_after_cycle_1": drop}, f, indent=1)
    return 1 if rows[-1]["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
