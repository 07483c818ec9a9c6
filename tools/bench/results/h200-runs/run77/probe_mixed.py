"""run 77 probe: init_process_group("cpu:gloo,cuda:conccl") (torch 2's per-device backends)
on 2 processes: which group torch makes, and whether CUDA and CPU tensors each reach their
backend. Prints one line per step per rank; never waits past its timeouts."""
import os
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, n, path):
    import conccl.torch  # noqa: F401
    torch.cuda.set_device(0)
    out = []

    def step(name, f):
        try:
            out.append(f"{name}: ok {f()}")
        except Exception as e:  # noqa: BLE001
            out.append(f"{name}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    def backend_subclass():  # can Python subclass the C++ Backend (torch 2's per-device backends) here?
        base = torch._C._distributed_c10d.Backend

        class Py(base):
            def __init__(self):
                super().__init__(0, 1)

            def allreduce(self, tensors, opts=None):
                raise NotImplementedError
        b = Py()
        return f"{[c.__name__ for c in type(b).__mro__]}, supports_splitting={getattr(b, 'supports_splitting', '?')}"
    step("Python subclass of c10d Backend", backend_subclass)
    step("init cpu:gloo,cuda:conccl", lambda: dist.init_process_group(
        "cpu:gloo,cuda:conccl", init_method="file://" + path, rank=rank, world_size=n, timeout=timedelta(seconds=30)))
    if dist.is_initialized():
        g = dist.group.WORLD
        step("group", lambda: f"{type(g).__name__} backend={dist.get_backend()}")

        def cuda():
            t = torch.full((4,), float(rank + 1), device="cuda")
            dist.all_reduce(t)
            return t.tolist()

        def cpu():
            t = torch.full((4,), float(rank + 1))
            dist.all_reduce(t)
            return t.tolist()
        step("all_reduce cuda", cuda)
        step("all_reduce cpu", cpu)
        step("barrier", lambda: dist.barrier())
        step("destroy", lambda: dist.destroy_process_group())
    for line in out:
        print(f"rank {rank}: {line}", flush=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(run, args=(2, os.path.join(d, "store")), nprocs=2)
    sys.exit(0)
