#!/usr/bin/env python3
"""tools/bench/py_call_overhead.py - what the Python package adds to each tensor call
(Communicator.all_gather_into_tensor), as the program around it holds more buffers.

On the emulated node (any machine), 2 ranks in this process, 1 KiB CPU tensors viewing
device buffers. Two numbers per row:
  python us   the package's own work per call: the C call replaced by a no-op, so what
              is left is argument checks, finding each tensor's buffer, the ctypes structs;
  call us     the whole call on the emulator (the emulated engines' time included).
Prints a table and writes JSON (argv[1], default py_call_overhead.json).

  PYTHONPATH=python CONCCL_LIBRARY=build/src/libconccl.so python3 tools/bench/py_call_overhead.py out.json
"""
import json
import sys
import time

import torch

import conccl


def per_call_us(fn, iters):
    fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


def row(held):
    with conccl.Device("emu", preset="small") as dev:
        comm = conccl.Communicator(dev, [0, 1])
        others = [dev.alloc(0, 4096) for _ in range(held)]  # the program's other buffers
        ins = [torch.from_dlpack(dev.alloc(g, 1024)).view(torch.uint8) for g in range(2)]
        outs = [torch.from_dlpack(dev.alloc(g, 2048)).view(torch.uint8) for g in range(2)]
        for t in ins:
            t.copy_(torch.randint(0, 256, (1024,), dtype=torch.uint8))
        call = lambda: comm.all_gather_into_tensor(outs, ins)  # noqa: E731
        full = per_call_us(call, 300)
        assert all(torch.equal(o, torch.cat(ins)) for o in outs), "the all-gather's bytes are wrong"
        real = conccl._all_gather
        conccl._all_gather = lambda *a: 0  # the C call as a no-op: the Python layer alone
        try:
            python = per_call_us(call, 5000)
        finally:
            conccl._all_gather = real
        del others
        return {"buffers_held": held, "python_us_per_call": round(python, 2), "call_us": round(full, 1)}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "py_call_overhead.json"
    rows = [row(h) for h in (0, 100, 1000)]
    print(f"{'buffers held':>12} {'python us':>10} {'call us':>9}")
    for r in rows:
        print(f"{r['buffers_held']:>12} {r['python_us_per_call']:>10.2f} {r['call_us']:>9.1f}")
    with open(out, "w") as f:
        json.dump({"bench": "py_call_overhead", "op": "all_gather_into_tensor", "ranks": 2, "bytes": 1024,
                   "backend": "emu", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
