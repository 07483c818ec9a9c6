#!/usr/bin/env python3
"""examples/python/allgather.py - an all-gather across the emulated node from Python.

    PYTHONPATH=python CONCCL_LIBRARY=build/src/libconccl.so python3 examples/python/allgather.py
    ... allgather.py emu "preset=small"    (a backend and its settings, docs/backends.md)
"""
import os
import sys

import conccl

backend = sys.argv[1] if len(sys.argv) > 1 else "emu"
settings = sys.argv[2] if len(sys.argv) > 2 else None
chunk = 1 << 20
with conccl.Device(backend, settings=settings) as dev:
    n = dev.gpu_count
    comm = conccl.Communicator(dev, range(n))
    data = [os.urandom(chunk) for _ in range(n)]
    send = [dev.alloc(r, chunk) for r in range(n)]
    recv = [dev.alloc(r, chunk * n) for r in range(n)]
    for r in range(n):
        send[r].upload(data[r])
    comm.all_gather(send, recv, chunk)
    want = b"".join(data)
    wrong = sum(recv[r].download() != want for r in range(n))
    plan = comm.plan("all_gather", chunk, send, recv)
    plan.launch()
    plan.wait()
    addr, value = plan.completion(0)
    print(f"allgather: {n} ranks x {chunk} bytes, variant {plan.variant}, rank 0 complete when "
          f"*{addr:#x} >= {value}, {wrong} ranks wrong")
    del plan, comm
    for b in send + recv:
        b.free()
sys.exit(1 if wrong else 0)
