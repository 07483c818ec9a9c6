#!/usr/bin/env python3
"""examples/python/torch_window_allgather.py - a PyTorch program as a user
writes one: one process per rank on the nv backend, each rank's input made by
a GEMM on the current stream, all-gathered on the copy engines on the same
stream, the output consumed by a kernel on the stream; every byte of every
round checked.

    PYTHONPATH=python python3 examples/python/torch_window_allgather.py [ranks] [rounds] [--default-allocator]

Tensors live in one window per rank (docs/multiprocess.md, "Windows"): a CUDA
buffer of the device (dev.alloc_cuda), registered once, viewed as a tensor
with torch.from_dlpack. Calls on tensors inside it need no registration and
no message between the ranks. --default-allocator makes the same tensors
with torch.empty instead (PyTorch's allocator, expandable segments): each is
registered as it comes and each call exchanges a vote between the ranks,
which is slower. Each rank prints the rounds it checked and the time per
call of 200 calls back to back (1 MiB per rank); the parent exits non-zero
if any rank failed.
"""
import os
import subprocess
import sys
import time

M = 512  # GEMM size: the input is an M x M int32 matrix, 1 MiB


def rank_main(r, n, uid, rounds, default_allocator):
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    import faulthandler
    faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "240")), exit=True)
    import torch

    import conccl
    torch.cuda.init()
    chunk = M * M * 4
    with conccl.Device("nv", process_slot=r) as dev:
        comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=0, loopback=True, timeout_ms=60000)
        window = None
        if default_allocator:
            inp = torch.empty(chunk, dtype=torch.uint8, device="cuda")
            out = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        else:
            heap_buffer = dev.alloc_cuda(0, (n + 1) * chunk)
            window = comm.register_window(heap_buffer)
            heap = torch.from_dlpack(heap_buffer)
            inp, out = heap[:chunk], heap[chunk:(n + 1) * chunk]

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
            inp.view(torch.int32).view(M, M).copy_((a @ b).to(torch.int32))  # producer: GEMM on the stream
            comm.all_gather_into_tensor(out, inp)                             # on the current stream
            for s in range(n):                                                # consumer kernels on the stream
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
            print(f"rank {r}: {int(bad)} words WRONG", flush=True)
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
        mode = "default allocator" if default_allocator else "window"
        print(f"rank {r}: {mode}: verified {rounds} rounds (GEMM -> all-gather -> check, every byte); "
              f"{us:.1f} us per call of {chunk} B per rank; {msgs:.1f} bootstrap messages per call", flush=True)
        if window is not None:
            window.close()
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
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import conccl
    uid = conccl.unique_id()
    env = dict(os.environ, CONCCL_EXAMPLE_UID=uid,
               PYTHONPATH=os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), "python"] if p))
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(n), str(rounds),
                               "1" if default else "0"], env=env) for r in range(n)]
    rcs = [p.wait() for p in procs]
    sys.exit(0 if all(rc == 0 for rc in rcs) else 1)


if __name__ == "__main__":
    main()
