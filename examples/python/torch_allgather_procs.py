#!/usr/bin/env python3
"""examples/python/torch_allgather_procs.py - one process per rank, as
torch.distributed runs: N processes on the one GPU (loopback), each with its
own conccl.Device (process_slot = rank) and its own CUDA tensors, all-gathered
on the copy engines with Communicator.all_gather_into_tensor(output, input),
the torch.distributed shape. The parent makes the id and starts the ranks.

    PYTHONPATH=python python3 examples/python/torch_allgather_procs.py [ranks] [MiB] [iters]

Each rank checks every byte of every round (random data, new each round; a
new output tensor in one round, so that the ranks plan again) and prints the
mean time per call; the parent exits non-zero if any rank failed.
"""
import os
import subprocess
import sys
import time

if len(sys.argv) > 1 and sys.argv[1] == "--rank":
    r, n, uid, chunk, iters = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    import faulthandler
    faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "240")), exit=True)
    import torch

    import conccl
    torch.cuda.init()
    with conccl.Device("nv", process_slot=r) as dev:
        comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=0, loopback=True, timeout_ms=60000)
        gen = torch.Generator(device="cuda").manual_seed(1000 + r)
        inp = torch.empty(chunk, dtype=torch.uint8, device="cuda")
        out = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        spare = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        stream = torch.cuda.current_stream()
        # Round k: rank s sends s * 7 + k (mod 256) in every byte but one
        # random byte; every rank checks every chunk.
        for k in range(4):
            dst = spare if (k == 2 and r == 0) else out
            inp.copy_(torch.full((chunk,), (r * 7 + k) % 256, dtype=torch.uint8, device="cuda"))
            inp[int(torch.randint(0, chunk, (1,), generator=gen, device="cuda"))] ^= 0x5A
            comm.all_gather_into_tensor(dst, inp, stream=stream)
            mine = inp.clone()
            gathered = [torch.empty_like(inp) for _ in range(n)]
            for s in range(n):
                gathered[s].copy_(dst[s * chunk:(s + 1) * chunk])
            torch.cuda.synchronize()
            for s in range(n):
                base = (s * 7 + k) % 256
                bad = int((gathered[s] != base).sum())
                if bad != 1 or (s == r and not torch.equal(gathered[s], mine)):
                    print(f"rank {r} round {k}: chunk {s} has {bad} bytes != {base}", flush=True)
                    sys.exit(1)
        # Warm-up: calls queue on the stream without a host wait, so the
        # library plans up to 4 per call site (one per call in flight) the
        # first time they overlap.
        for _ in range(8):
            comm.all_gather_into_tensor(out, inp, stream=stream)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_gather_into_tensor(out, inp, stream=stream)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / iters
        # One write per line: the ranks share the parent's stdout.
        os.write(1, (f"rank {r}: verified 4 rounds; {iters} calls of {chunk} B: {dt * 1e6:.1f} us per call, "
                     f"busbw {(n - 1) * chunk / dt / 1e9:.1f} GB/s\n").encode())
        del comm
        dev.release_tensors()
    sys.exit(0)

import conccl  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
chunk = int(float(sys.argv[2]) * (1 << 20)) if len(sys.argv) > 2 else 16 << 20
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 50
uid = conccl.unique_id()
procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(n), uid, str(chunk), str(iters)])
         for r in range(n)]
codes = [p.wait(timeout=300) for p in procs]
print("ranks exited", codes)
sys.exit(0 if all(c == 0 for c in codes) else 1)
