#!/usr/bin/env python3
"""tools/bench/nv_c3_factors.py - which difference between the two C3
measurements on the H200 (docs/perf/h200-collectives.md) moves the result:
the cuBLAS bench (uniform data, distinct operands, host launch + wait of the
all-gather) measured 73 %, the PyTorch path (torch.randn, x @ x, launches
ordered on a CUDA stream) 88 %. This runs the PyTorch C3 with one factor
changed at a time:

  data      randn (normal) | uniform (U(-1, 1), the bench's) | zeros
  operands  same (x @ x) | distinct (x @ y, the bench's)
  path      stream (all_gather_into_tensor on a side stream) |
            host (a host thread launches each all-gather and waits for it, as the bench)

    [SOAK_MS=1000 REPS=3] PYTHONPATH=python python3 tools/bench/nv_c3_factors.py [ranks] [MiB] [json-out]

SOAK_MS runs matmuls for that long before every timed phase, so that the
matmuls alone and the overlapped run start from the same power and thermal
state; REPS interleaves that many rounds and reports medians. BRACKET=1 puts
every overlapped phase between two matmul-alone phases and takes their mean
as t_mm (nv_c3_bench's protocol, which cancels drift between phases); MM sets
the matmuls per phase (300); CONFIGS="randn,same,stream uniform,distinct,host"
runs only those configurations.

Prints one line per configuration and a table; % of ideal = 100 x (S_real - 1)
/ (S_ideal - 1), S_ideal = (t_mm + t_ag) / max(t_mm, t_ag), S_real = (t_mm +
t_ag) / t_both (the ConCCL paper's metric), as examples/python/torch_allgather.py.
"""
import faulthandler
import json
import os
import sys
import threading
import time

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "500")), exit=True)
import torch  # noqa: E402

import conccl  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
chunk = (int(sys.argv[2]) if len(sys.argv) > 2 else 64) << 20
json_out = sys.argv[3] if len(sys.argv) > 3 else None
MM = int(os.environ.get("MM", "300"))  # matmuls per C3 measurement (300: about 480 ms alone)
SOAK_MS = int(os.environ.get("SOAK_MS", "0"))  # matmuls before each timed phase (0: none, as run 24)
REPS = int(os.environ.get("REPS", "1"))        # rounds per configuration (medians)
BRACKET = os.environ.get("BRACKET", "0") == "1"  # overlapped phases between matmul-alone phases

torch.cuda.init()
dev = conccl.Device("nv")
comm = conccl.Communicator(dev, [0] * n, loopback=True)
gen = torch.Generator(device="cuda").manual_seed(7)
inputs = [torch.randint(0, 256, (chunk,), dtype=torch.uint8, device="cuda", generator=gen) for _ in range(n)]
outputs = [torch.empty(n * chunk, dtype=torch.uint8, device="cuda") for _ in range(n)]
ref = torch.cat(inputs)
mm_stream, ag_stream = torch.cuda.Stream(), torch.cuda.Stream()
# The host path: the same gathers as a plan over the registered tensors,
# launched and waited for from a host thread (ctypes releases the GIL).
send = [dev._tensor_buffer(t, 0) for t in inputs]
recv = [dev._tensor_buffer(t, 0) for t in outputs]
plan = comm.plan("all_gather", chunk, send, recv)


def operands(data, distinct):
    def make():
        if data == "randn":
            return torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=gen)
        if data == "uniform":
            u = torch.rand(8192, 8192, device="cuda", dtype=torch.float32, generator=gen)
            return (u * 2 - 1).to(torch.bfloat16)
        return torch.zeros(8192, 8192, device="cuda", dtype=torch.bfloat16)
    x = make()
    return x, (make() if distinct else x)


def c3(data, distinct, path):
    x, y = operands(data, distinct)

    def matmuls(k):
        with torch.cuda.stream(mm_stream):
            for _ in range(k):
                x @ y

    def gathers(k):
        if path == "stream":
            for _ in range(k):
                comm.all_gather_into_tensor(outputs, inputs, stream=ag_stream)
            return None

        def run():
            for _ in range(k):
                plan.launch()
                plan.wait()
        t = threading.Thread(target=run)
        t.start()
        return t

    def timed(*work):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        threads = [w() for w in work]
        for t in threads:
            if t is not None:
                t.join()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def soaked(*work):
        # The same power and thermal history before every timed phase: SOAK_MS
        # of matmuls first (run 24: the matmuls alone took 482 or 508 ms
        # depending on what ran before them, which moved % of ideal by 10).
        if SOAK_MS:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < SOAK_MS / 1e3:
                matmuls(10)
                torch.cuda.synchronize()
        return timed(*work)

    timed(lambda: matmuls(20), lambda: gathers(4))  # warm-up
    t_one = timed(lambda: gathers(10)) / 10
    t_mm0 = soaked(lambda: matmuls(MM))
    ag = max(1, round(0.8 * t_mm0 / t_one))
    # REPS rounds of (matmuls, gathers, both), interleaved; medians. With
    # BRACKET, each round is (gathers, matmuls, both, matmuls) and the round's
    # t_mm is the mean of the two matmul phases around the overlapped one.
    mm_t, ag_t, both_t, pcts = [], [], [], []
    for _ in range(REPS):
        ag_t.append(soaked(lambda: gathers(ag)))
        mm_before = soaked(lambda: matmuls(MM))
        both_t.append(soaked(lambda: matmuls(MM), lambda: gathers(ag)))
        mm_t.append((mm_before + soaked(lambda: matmuls(MM))) / 2 if BRACKET else mm_before)
        s_i = (mm_t[-1] + ag_t[-1]) / max(mm_t[-1], ag_t[-1])
        pcts.append(100 * ((mm_t[-1] + ag_t[-1]) / both_t[-1] - 1) / (s_i - 1))
    med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
    t_mm, t_ag, t_both = med(mm_t), med(ag_t), med(both_t)
    ok = all(torch.equal(o, ref) for o in outputs)
    s_ideal = (t_mm + t_ag) / max(t_mm, t_ag)
    s_real = (t_mm + t_ag) / t_both
    pct = med(pcts) if BRACKET else 100 * (s_real - 1) / (s_ideal - 1)
    # The matmuls' slowdown if they finished last (they run the whole time).
    row = {"data": data, "operands": "distinct" if distinct else "same", "path": path, "t_mm_ms": t_mm * 1e3,
           "t_ag_ms": t_ag * 1e3, "t_both_ms": t_both * 1e3, "gathers": ag,
           "gbps": ag * n * n * chunk / t_ag / 1e9, "pct_of_ideal": pct,
           "mm_slowdown_pct": 100 * (t_both / t_mm - 1), "verified": ok, "soak_ms": SOAK_MS,
           "t_mm_all_ms": [t * 1e3 for t in mm_t], "t_ag_all_ms": [t * 1e3 for t in ag_t],
           "t_both_all_ms": [t * 1e3 for t in both_t], "bracket": BRACKET, "pct_reps": pcts, "matmuls": MM}
    print(f"C3 data={data:7s} operands={row['operands']:8s} path={path:6s}: mm {t_mm * 1e3:6.1f} ms, "
          f"ag x{ag} {t_ag * 1e3:6.1f} ms ({row['gbps']:.0f} GB/s), both {t_both * 1e3:6.1f} ms -> "
          f"{pct:5.1f}% of ideal, verified {ok}", flush=True)
    return row


configs = [("randn", False, "stream"),    # the PyTorch path of run 23
           ("uniform", True, "host"),     # the bench's data, operands and path
           ("uniform", False, "stream"),  # one factor changed from the first
           ("randn", True, "stream"),
           ("randn", False, "host"),
           ("zeros", False, "stream"),
           ("randn", False, "stream")]    # the first again: run-to-run spread
if os.environ.get("CONFIGS"):
    configs = [(d, o == "distinct", p) for d, o, p in (c.split(",") for c in os.environ["CONFIGS"].split())]
rows = [c3(*c) for c in configs]
print("\n| data | operands | path | % of ideal | matmul +% | GB/s | verified |\n|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['data']} | {r['operands']} | {r['path']} | {r['pct_of_ideal']:.1f} | {r['mm_slowdown_pct']:.1f} | "
          f"{r['gbps']:.0f} | {r['verified']} |")
if json_out:
    with open(json_out, "w") as f:
        json.dump({"ranks": n, "chunk_bytes": chunk, "matmuls": MM, "rows": rows}, f, indent=1)
del plan
dev.release_tensors()
dev.close()
sys.exit(0 if all(r["verified"] for r in rows) else 1)
