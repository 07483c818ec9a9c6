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
"""
import os
import subprocess
import sys
import time

M = 512  # GEMM size: the input is an M x M int32 matrix, 1 MiB


def rank_main(r, n, uid, rounds, default_allocator):
    import faulthandler
    faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "240")), exit=True)
    import torch

    import conccl
    import conccl.torch
    torch.cuda.set_device(0)
    chunk = M * M * 4
    with conccl.Device("nv", process_slot=r) as dev:
        comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=0, loopback=True, timeout_ms=60000)
        # Every rank, the same bytes. PyTorch's caching allocator takes
        # segments of 2 MiB (tensors up to 1 MiB) and 20 MiB (up to 10 MiB)
        # from it; the staging area of --default-allocator comes from it too.
        pool = conccl.torch.SymmetricPool(comm, 64 << 20)
        if default_allocator:
            inp = torch.empty(chunk, dtype=torch.uint8, device="cuda")
            out = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        else:
            with torch.cuda.use_mem_pool(pool.mempool):  # every rank, the same allocations in the same order
                inp = torch.empty(chunk, dtype=torch.uint8, device="cuda")
                out = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        in_pool = pool.owns(inp) and pool.owns(out)
        if in_pool == default_allocator:
            print(f"rank {r}: the tensors are {'' if in_pool else 'not '}in the pool", flush=True)
            return 1
        where = (f"pool offsets {inp.data_ptr() - pool.base} and {out.data_ptr() - pool.base}" if in_pool
                 else "PyTorch's default allocator, staged through the pool")

        def operands(s, k):
            # Small integers: the GEMM's sums are exact in fp32, so every
            # rank can compute every rank's input bit for bit.
            g = torch.Generator(device="cuda").manual_seed(1000 * k + s)
            a = torch.randint(-4, 5, (M, M), generator=g, device="cuda").float()
            b = torch.randint(-4, 5, (M, M), generator=g, device="cuda").float()
            return a, b

        bad = torch.zeros((), dtype=torch.int64, device="cuda")
        stats0 = comm.stats()
        for k in range(rounds):
            a, b = operands(r, k)
            inp.view(torch.int32).view(M, M).copy_((a @ b).to(torch.int32))  # producer: a GEMM on the stream
            comm.all_gather_into_tensor(out, inp)                             # on the current stream
            for s in range(n):                                                # consumers: kernels on the stream
                sa, sb = operands(s, k)
                want = (sa @ sb).to(torch.int32).view(-1)
                got = out[s * chunk:(s + 1) * chunk].view(torch.int32)
                bad += (got != want).sum()
        torch.cuda.synchronize()
        stats1 = comm.stats()
        err = comm.async_error()
        if err is not None:
            raise err
        if int(bad):
            print(f"rank {r}: {int(bad)} words WRONG ({where})", flush=True)
            return 1
        msgs = (stats1["bootstrap_messages_sent"] - stats0["bootstrap_messages_sent"] +
                stats1["bootstrap_messages_received"] - stats0["bootstrap_messages_received"]) / rounds
        # Time per call, 200 back to back on the stream.
        iters = 200
        for _ in range(5):
            comm.all_gather_into_tensor(out, inp)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_gather_into_tensor(out, inp)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) / iters * 1e6
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
        inp = out = got = None
        torch.cuda.synchronize()
        pool.close()
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        r, n, rounds, default = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        # The id is a secret (docs/multiprocess.md): in the environment, not on the command line.
        sys.exit(rank_main(r, n, os.environ["CONCCL_EXAMPLE_UID"], rounds, default == "1"))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    default = "--default-allocator" in sys.argv[1:]
    n = int(args[0]) if args else 2
    rounds = int(args[1]) if len(args) > 1 else 100
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "python"))
    import conccl
    uid = conccl.unique_id()
    env = dict(os.environ, CONCCL_EXAMPLE_UID=uid,
               PYTHONPATH=os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""),
                                                      os.path.join(here, "..", "..", "python")] if p))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r), str(n), str(rounds),
                               "1" if default else "0"], env=env) for r in range(n)]
    rcs = [p.wait() for p in procs]
    sys.exit(0 if all(rc == 0 for rc in rcs) else 1)


if __name__ == "__main__":
    main()
