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

What the one-process-per-rank examples share (starting the ranks, the
watchdog, the communicator, the GEMM rounds, timing calls) is in _rank_procs.py.
"""
import os

from _rank_procs import allocator_example_main, communicator, gemm_rounds, start_watchdog, time_calls

M = 512  # GEMM size: the input is an M x M int32 matrix, 1 MiB


def rank_main(r, n, uid, rounds, default_allocator):
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    start_watchdog()
    import torch

    import conccl
    torch.cuda.init()
    chunk = M * M * 4
    with conccl.Device("nv", process_slot=r) as dev:
        comm = communicator(dev, r, n, uid)
        window = None
        if default_allocator:
            inp = torch.empty(chunk, dtype=torch.uint8, device="cuda")
            out = torch.empty(n * chunk, dtype=torch.uint8, device="cuda")
        else:
            heap_buffer = dev.alloc_cuda(0, (n + 1) * chunk)
            window = comm.register_window(heap_buffer)
            heap = torch.from_dlpack(heap_buffer)
            inp, out = heap[:chunk], heap[chunk:(n + 1) * chunk]

        bad, msgs = gemm_rounds(comm, inp, out, r, n, rounds, M)
        if bad:
            print(f"rank {r}: {bad} words WRONG", flush=True)
            return 1
        # Time per call, 200 back to back on the stream.
        us = time_calls(comm, out, inp, iters=200, warmup=5)
        mode = "default allocator" if default_allocator else "window"
        print(f"rank {r}: {mode}: verified {rounds} rounds (GEMM -> all-gather -> check, every byte); "
              f"{us:.1f} us per call of {chunk} B per rank; {msgs:.1f} bootstrap messages per call", flush=True)
        if window is not None:
            window.close()
    return 0


if __name__ == "__main__":
    allocator_example_main(__file__, rank_main)
