#!/usr/bin/env python3
"""tools/bench/nv_c3_reduce.py - issue #26's comparison on the GPU machine: how
much a bf16 GEMM slows beside a reduce-scatter whose moves run on the copy
engines (ConCCL: Communicator.reduce_scatter_tensor, the reduce step one PTX
kernel on few SMs), against the same reduce-scatter done on the SMs (torch by
hand: copy kernels gather each destination's slices, one sum kernel reduces
them in float32), measured in one run by one protocol (the C3 protocol of
nv_c3_factors.py / nv_c3_bench: the ConCCL paper's metric).

    PYTHONPATH=python CONCCL_LIBRARY=<build>/src/libconccl.so.0 \\
        python3 tools/bench/nv_c3_reduce.py [ranks 4] [MiB per rank's input 64] [json-out]

Every rank of the reduce-scatter is a loopback rank on GPU 0 in this one
process, as nv_c3_factors.py's all-gather. Inputs are small integers in
bfloat16, so every sum is exact in any order: both variants' outputs are
compared bit for bit with a float64 reference before anything is timed.

Per variant, REPS rounds (medians): MM matmuls (N x N bf16) alone on one
stream; K reduce-scatters alone on another, K chosen so that they take about
as long; then both at once. t_mm, t_rs and t_both are wall times of those
phases; the GEMM's own time inside the overlapped phase comes from CUDA events
on its stream, and its slowdown is that over t_mm. % of ideal = 100 x (S_real
- 1) / (S_ideal - 1), S_ideal = (t_mm + t_rs) / max(t_mm, t_rs), S_real =
(t_mm + t_rs) / t_both. MM (200), N (8192), REPS (3) and SOAK_MS (0: matmuls
for that long before every timed phase) come from the environment;
TRACE=1 then profiles one overlapped phase per variant (torch.profiler) and
prints the matmul kernels' mean time alone and beside it, and the gaps
between them.

By default each variant runs as many reduce-scatters as fit in the matmuls'
time alone (the C3 protocol), so a faster variant does more work in the
overlapped phase. SAME_K=1 gives every variant the engines variant's count,
so both overlap the same work (the issue's "the same reduce-scatter").
ENGINES=2,3 (ids) or ENGINES=small (the engines with fewer PCEs than the
largest) restricts the engines variant to those copy engines: a bandwidth
budget, as nv_c3_bench's budget mode does for the all-gather.
"""
import faulthandler
import json
import os
import statistics
import sys
import time

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "500")), exit=True)
import torch  # noqa: E402

import conccl  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
mib = int(sys.argv[2]) if len(sys.argv) > 2 else 64
json_out = sys.argv[3] if len(sys.argv) > 3 else None
MM = int(os.environ.get("MM", "200"))
N = int(os.environ.get("N", "8192"))
REPS = int(os.environ.get("REPS", "3"))
SOAK_MS = int(os.environ.get("SOAK_MS", "0"))  # matmuls before each timed phase (0: none)
SAME_K = os.environ.get("SAME_K", "0") == "1"
ENGINES_ARG = os.environ.get("ENGINES", "")

torch.cuda.init()
dev = conccl.Device("nv")


def pick_engines(arg):
    """ENGINES: ids ("2,3"), "small" (the copy engines with fewer PCEs than the
    largest: LCE2+LCE3 on an H200, about 190 GB/s) or "" (all)."""
    if arg != "small":
        return [int(e) for e in arg.split(",") if e.strip()]
    eng = [e for e in dev.topology()["gpus"][0]["engines"] if "weight" in e]
    top = max(e["weight"] for e in eng)
    return [e["id"] for e in eng if e["weight"] < top]


ENGINES = pick_engines(ENGINES_ARG)
comm = conccl.Communicator(dev, [0] * n, loopback=True, engines=ENGINES or None)
count = (mib << 20) // 2 // n  # output elements per rank; a rank's input is n x count bf16
gen = torch.Generator(device="cuda").manual_seed(26)
inputs = [torch.randint(-8, 9, (n * count,), device="cuda", generator=gen).to(torch.bfloat16) for _ in range(n)]
outputs = [torch.empty(count, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
sm_outputs = [torch.empty(count, dtype=torch.bfloat16, device="cuda") for _ in range(n)]
staging = torch.empty((n, count), dtype=torch.bfloat16, device="cuda")
mm_stream, rs_stream = torch.cuda.Stream(), torch.cuda.Stream()
a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16, generator=gen)
b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16, generator=gen)
c = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)


def rs_engines():
    comm.reduce_scatter_tensor(outputs, inputs, op="sum", stream=rs_stream)


def rs_sm():
    # Destination r's slices of every rank's input gathered by copy kernels,
    # then reduced in float32 by one sum kernel: what the engines and the
    # reduce kernel do, all on the SMs.
    with torch.cuda.stream(rs_stream):
        for r in range(n):
            for q in range(n):
                staging[q].copy_(inputs[q][r * count:(r + 1) * count])
            sm_outputs[r].copy_(torch.sum(staging, dim=0, dtype=torch.float32))


VARIANTS = {"engines": (rs_engines, outputs), "sm": (rs_sm, sm_outputs)}


def check(name):
    fn, outs = VARIANTS[name]
    for o in outs:
        o.fill_(float("nan"))
    fn()
    torch.cuda.synchronize()
    err = comm.async_error()
    if err is not None:
        raise err
    wrong = 0
    for r in range(n):
        want = sum(inputs[q][r * count:(r + 1) * count].double() for q in range(n))
        wrong += int((outs[r].double() != want).sum())
    return wrong


def matmuls(k=MM):
    with torch.cuda.stream(mm_stream):
        for _ in range(k):
            torch.matmul(a, b, out=c)


def soak():
    """SOAK_MS of matmuls, so that every timed phase starts from the same power
    and clock state (run 42c: phases of 0.1 s ran in the power cap's
    transient, as nv_c3_factors.py's run 24 found for the all-gather)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < SOAK_MS / 1e3:
        matmuls(10)
        torch.cuda.synchronize()


def timed(*phases):
    soak()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for p in phases:
        p()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def mm_event_time(mm_phase, *others):
    """Wall time of the phases run together, and the matmul stream's own time in it (ms).
    The end event goes on the matmul stream right after the matmuls, before the
    other phases are queued: a call that blocks the host (a one-process cached
    call waits once 4 are in flight) would otherwise record it late, and the
    matmuls' time would read as the whole phase's (runs 42 and 43a did)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    soak()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record(mm_stream)
    mm_phase()
    end.record(mm_stream)
    for p in others:
        p()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3, start.elapsed_time(end)


rows = []
for name in VARIANTS:
    wrong = check(name)
    fn = VARIANTS[name][0]
    timed(matmuls)  # warm-up: clocks, cuBLAS heuristics
    one = timed(fn, fn, fn) / 3
    t_mm0 = timed(matmuls)
    k = max(1, round(t_mm0 / one))
    if SAME_K and rows:
        k = rows[0]["reduce_scatters"]  # the engines variant's count: the same work beside the GEMM
    reps = []
    for _ in range(REPS):
        t_mm = timed(matmuls)
        t_rs = timed(lambda: [fn() for _ in range(k)])
        # The matmuls are queued first, as in nv_c3_factors.py: a call that
        # returns only once its plan may be relaunched would otherwise hold
        # the matmuls back on the host and measure that, not the overlap.
        t_both, mm_in_both = mm_event_time(matmuls, lambda: [fn() for _ in range(k)])
        s_ideal = (t_mm + t_rs) / max(t_mm, t_rs)
        s_real = (t_mm + t_rs) / t_both
        reps.append({"t_mm_ms": t_mm, "t_rs_ms": t_rs, "t_both_ms": t_both, "mm_in_both_ms": mm_in_both,
                     "gemm_slowdown_pct": 100 * (mm_in_both / t_mm - 1),
                     "pct_of_ideal": 100 * (s_real - 1) / (s_ideal - 1) if s_ideal > 1 else float("nan")})
    med = {key: statistics.median(r[key] for r in reps) for key in reps[0]}
    bytes_moved = (n - 1) * count * 2 * n  # every rank receives (n-1) slices of count bf16
    rows.append(dict(variant=name, ranks=n, mib_per_rank_input=mib, reduce_scatters=k, wrong_elements=wrong,
                     rs_alone_ms_each=med["t_rs_ms"] / k, rs_busbw_gbs=bytes_moved / n / (med["t_rs_ms"] / k) / 1e6,
                     reps=reps, **med))
    comm.async_error()



def profiled_kernels(*phases):
    """The CUDA kernels of the phases run under torch.profiler: (those on the
    matmul stream in time order, the others)."""
    import collections
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for p in phases:
            p()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name)).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    by_stream = collections.defaultdict(list)
    for e in kernels:
        by_stream[e.get("args", {}).get("stream")].append(e)
    # The matmul stream: the one whose kernels take the most time.
    mm_key = max(by_stream, key=lambda st: sum(e["dur"] for e in by_stream[st]))
    others = [e for st, es in by_stream.items() if st != mm_key for e in es]
    return sorted(by_stream[mm_key], key=lambda e: e["ts"]), others


def trace(name, k):
    """TRACE=1: whether the matmuls beside `name` got slower each (contention
    for SMs, memory or power) or waited between kernels."""
    import collections
    alone, _ = profiled_kernels(matmuls)
    on_mm, others = profiled_kernels(matmuls, lambda: [VARIANTS[name][0]() for _ in range(k)])
    gaps = sum(max(0.0, b["ts"] - (a["ts"] + a["dur"])) for a, b in zip(on_mm, on_mm[1:]))
    names = collections.Counter(e["name"][:48] for e in others)
    print(f"# trace {name} (x{k}): matmul kernels {statistics.mean(e['dur'] for e in alone):.0f} us each alone, "
          f"{statistics.mean(e['dur'] for e in on_mm):.0f} us beside it ({len(on_mm)} kernels, "
          f"{gaps / 1e3:.1f} ms of gaps); {len(others)} other kernels, {sum(e['dur'] for e in others) / 1e3:.1f} ms, "
          f"{names.most_common(2)}")


if os.environ.get("TRACE"):
    for row in rows:
        trace(row["variant"], max(1, row["reduce_scatters"] // 2))

print(f"# nv_c3_reduce: {n} loopback ranks, {mib} MiB bf16 input per rank, sum; {MM} matmuls {N}x{N} bf16; "
      f"medians of {REPS}; engines {ENGINES or 'all'}; {'same count of reduce-scatters' if SAME_K else 'C3 count per variant'}")
print("%-8s %6s %9s %9s %9s %11s %12s %10s %8s" % ("variant", "RSs", "t_mm ms", "t_rs ms", "t_both", "mm in both",
                                                  "GEMM slower", "% ideal", "#wrong"))
for r in rows:
    print("%-8s %6d %9.1f %9.1f %9.1f %11.1f %11.1f%% %10.1f %8d" % (
        r["variant"], r["reduce_scatters"], r["t_mm_ms"], r["t_rs_ms"], r["t_both_ms"], r["mm_in_both_ms"],
        r["gemm_slowdown_pct"], r["pct_of_ideal"], r["wrong_elements"]))
if json_out:
    with open(json_out, "w") as f:
        json.dump({"bench": "nv_c3_reduce", "engines": ENGINES, "same_k": SAME_K, "soak_ms": SOAK_MS, "rows": rows}, f, indent=1)
sys.exit(1 if any(r["wrong_elements"] for r in rows) else 0)
