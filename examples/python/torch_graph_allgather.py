#!/usr/bin/env python3
"""examples/python/torch_graph_allgather.py - a ConCCL all-gather inside a CUDA graph
(torch.cuda.CUDAGraph), replayed many times (docs/graphs.md).

    PYTHONPATH=python python3 examples/python/torch_graph_allgather.py [ranks] [replays]

One process per rank on the nv backend, the tensors from a symmetric pool (so
the call goes through a window, which capture needs). Each rank captures one
step: a GEMM makes its input from two operand tensors, the all-gather runs on
the copy engines, and kernels compare every rank's part with what that rank's
GEMM gives, counting wrong words in a tensor. The step is then replayed
`replays` times (1000), new operands copied in before each replay, so every
replay's output differs from the last and is checked. Rank 0 also times a
captured 1 KiB all-gather per replay against the same call uncaptured.

Run on the H200 (docs/perf/h200-graphs.md): 1000 replays on 2 and 4 processes,
every word right, with and without CUDA MPS.

What the one-process-per-rank examples share (starting the ranks, the
watchdog, the communicator, the GEMM rounds, timing calls) is in _rank_procs.py.
"""
import os
import sys
import time

from _rank_procs import launch, pool_rank, pool_tensors, rank_uid, start_watchdog, time_calls

M = 256  # the input: an M x M int32 matrix, 256 KiB


def rank_main(r, n, uid, replays):
    start_watchdog()
    import torch

    chunk = M * M * 4
    with pool_rank(r, n, uid) as (comm, pool):
        inp, out, small_in, small_out = pool_tensors(pool, chunk, n * chunk, 1024, n * 1024)
        a = torch.empty(n, M, M, device="cuda")  # every rank's operands (the check recomputes them)
        b = torch.empty(n, M, M, device="cuda")
        bad = torch.zeros((), dtype=torch.int64, device="cuda")

        def operands(k):
            g = torch.Generator(device="cuda").manual_seed(1000 * k + 7)
            a.copy_(torch.randint(-4, 5, (n, M, M), generator=g, device="cuda").float())
            b.copy_(torch.randint(-4, 5, (n, M, M), generator=g, device="cuda").float())

        def step():
            inp.view(torch.int32).view(M, M).copy_((a[r] @ b[r]).to(torch.int32))  # producer: a GEMM
            comm.all_gather_into_tensor(out, inp)                                     # on the current stream
            want = torch.bmm(a, b).to(torch.int32).view(n, -1)                       # consumers
            bad.add_((out.view(torch.int32).view(n, -1) != want).sum())

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on the capture stream: its ConCCL stream state exists before capture
            operands(0)
            step()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        if int(bad):
            print(f"rank {r}: the uncaptured warm-up step is WRONG ({int(bad)} words)", flush=True)
            return 1
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
            step()
        for k in range(1, replays + 1):
            operands(k)
            g.replay()
        torch.cuda.synchronize()
        err = comm.async_error()
        if err is not None:
            raise err
        if int(bad):
            print(f"rank {r}: {int(bad)} words WRONG over {replays} replays", flush=True)
            return 1

        # A 1 KiB all-gather: per call uncaptured, per replay captured.
        iters = 500
        with torch.cuda.stream(s):
            plain_us = time_calls(comm, small_out, small_in, iters, warmup=10)
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, stream=s, capture_error_mode="thread_local"):
            comm.all_gather_into_tensor(small_out, small_in)
        for _ in range(10):
            g2.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            g2.replay()
        torch.cuda.synchronize()
        graph_us = (time.perf_counter() - t0) / iters * 1e6
        err = comm.async_error()
        if err is not None:
            raise err
        os.write(1, (f"rank {r}: {replays} replays of GEMM -> all-gather -> check, every word right; 1 KiB "
                     f"all-gather {plain_us:.1f} us per call, {graph_us:.1f} us per replay\n").encode())
        del g, g2
        inp = out = small_in = small_out = None
        torch.cuda.synchronize()
        pool.close()
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        r, n, replays = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        sys.exit(rank_main(r, n, rank_uid(), replays))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 2
    replays = int(args[1]) if len(args) > 1 else 1000
    launch(__file__, n, [str(replays)])


if __name__ == "__main__":
    main()
