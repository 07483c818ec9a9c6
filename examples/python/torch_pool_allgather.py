#!/usr/bin/env python3
"""examples/python/torch_pool_allgather.py - a PyTorch program as a user writes
one, with ConCCL's memory pool: one process per rank on the nv backend, the
collective's tensors allocated from a symmetric pool
(`with torch.cuda.use_mem_pool(pool.mempool)`), each rank's input made by a
GEMM on the current stream, all-gathered on the copy engines on the same
stream, the output consumed by kernels on the stream; every byte of every
round checked on the GPU.

    PYTHONPATH=python python3 examples/python/torch_pool_allgather.py [ranks] [rounds] [--default-allocator]

The pool (conccl.torch.SymmetricPool, docs/multiprocess.md "PyTorch memory
pool") is one heap per rank registered once as a window; the same
allocations on every rank give tensors at the same offsets, so the calls on
them need no registration and no message between the ranks (the fast form).
--default-allocator makes the same tensors with plain torch.empty (PyTorch's
default allocator, cudaMalloc): each call then stages them through the pool
on the stream (copy in, call, copy out), which is correct but slower. Needs
PyTorch >= 2.5 (torch.cuda.MemPool) for the pool form; the default-allocator
form runs on any PyTorch with CUDA. Each rank prints the rounds it checked,
the bootstrap messages per call and the time per call of 200 calls back to
back (1 MiB per rank); the parent exits non-zero if any rank failed.

What the one-process-per-rank examples share (starting the ranks, the
watchdog, the communicator, the GEMM rounds, timing calls) is in _rank_procs.py.
"""
import os
import time

from _rank_procs import allocator_example_main, gemm_rounds, pool_rank, pool_tensors, start_watchdog, time_calls

M = 512  # GEMM size: the input is an M x M int32 matrix, 1 MiB


def rank_main(r, n, uid, rounds, default_allocator):
    start_watchdog()
    import torch

    chunk = M * M * 4
    # The pool (64 MiB): every rank, the same bytes. PyTorch's caching
    # allocator takes segments of 2 MiB (tensors up to 1 MiB) and 20 MiB (up
    # to 10 MiB) from it; the staging area of --default-allocator comes from
    # it too.
    with pool_rank(r, n, uid) as (comm, pool):
        if default_allocator:
            inp = torch.empty(chunk, dtype=torch.uint8, device="cuda")
            out = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        else:
            inp, out = pool_tensors(pool, chunk, n * chunk)
        in_pool = pool.owns(inp) and pool.owns(out)
        if in_pool == default_allocator:
            print(f"rank {r}: the tensors are {'' if in_pool else 'not '}in the pool", flush=True)
            return 1
        where = (f"pool offsets {inp.data_ptr() - pool.base} and {out.data_ptr() - pool.base}" if in_pool
                 else "PyTorch's default allocator, staged through the pool")

        bad, msgs = gemm_rounds(comm, inp, out, r, n, rounds, M)
        if bad:
            print(f"rank {r}: {bad} words WRONG ({where})", flush=True)
            return 1
        # Time per call, 200 back to back on the stream.
        us = time_calls(comm, out, inp, iters=200, warmup=5)
        # Host time to issue a call: 4 calls at a time after the stream is idle.
        host = 0.0
        for _ in range(25):
            torch.cuda.synchronize()
            h0 = time.perf_counter()
            for _ in range(4):
                comm.all_gather_into_tensor(out, inp)
            host += time.perf_counter() - h0
        torch.cuda.synchronize()
        host_us = host / 100 * 1e6
        err = comm.async_error()
        if err is not None:
            raise err
        mode = "default allocator (staged)" if default_allocator else "pool"
        st = pool.stats()
        os.write(1, (f"rank {r}: {mode}: verified {rounds} rounds (GEMM -> all-gather -> check, every byte; "
                     f"{where}); {us:.1f} us per call of {chunk} B per rank ({host_us:.1f} us of host time to issue "
                     f"it); {msgs:.1f} bootstrap messages per call; heap {st['used']} of {st['bytes']} B used\n")
                    .encode())
        # Tensors of the pool (and views of them) die before it; closing it
        # is collective: every rank, here.
        inp = out = None
        torch.cuda.synchronize()
        pool.close()
    return 0


if __name__ == "__main__":
    allocator_example_main(__file__, rank_main)
