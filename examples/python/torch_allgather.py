#!/usr/bin/env python3
"""examples/python/torch_allgather.py - PyTorch CUDA tensors all-gathered on the
GPU's copy engines (backend "nv"), ordered on the current CUDA stream, with N
loopback ranks on one GPU; then the same all-gather beside a torch.matmul loop.

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \\
    PYTHONPATH=python LD_LIBRARY_PATH=<prefix>/lib python3 examples/python/torch_allgather.py [ranks] [MiB]

Expandable segments make PyTorch allocate with cuMemCreate and POSIX-fd
handles, which the copy engines can map (plain cudaMalloc memory cannot be).
Prints what it checked and one C3 line:
  % of ideal = 100 x (S_real - 1) / (S_ideal - 1), S_ideal = (t_mm + t_ag) / max(t_mm, t_ag),
  S_real = (t_mm + t_ag) / t_both (the ConCCL paper's metric).
"""
import faulthandler
import os
import sys
import time

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
# A stream parked on a signal that never comes would hang the process (and its
# exit): a watchdog ends it with a traceback instead.
faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "240")), exit=True)
import torch  # noqa: E402

import conccl  # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
chunk = (int(sys.argv[2]) if len(sys.argv) > 2 else 64) << 20
torch.cuda.init()
dev = conccl.Device("nv")
comm = conccl.Communicator(dev, [0] * n, loopback=True)
gen = torch.Generator(device="cuda").manual_seed(7)


def rand_bytes(nbytes):
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda", generator=gen)


inputs = [rand_bytes(chunk) for _ in range(n)]
outputs = [torch.empty(n * chunk, dtype=torch.uint8, device="cuda") for _ in range(n)]

# 1. Ordered on the stream: the inputs are rewritten by kernels queued behind a
# long matmul, and the all-gather is queued right after them with no host
# synchronisation. Copies that started early would gather the old bytes.
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
checks = []
for rnd in range(3):
    for _ in range(20):
        a @ a
    for t in inputs:
        t.add_(1)  # new data, written by a kernel on the current stream
    comm.all_gather_into_tensor(outputs, inputs)
    ref = torch.cat(inputs)  # queued after the all-gather: sees the stream's order
    checks.append(all(torch.equal(o, ref) for o in outputs))
torch.cuda.synchronize()
print(f"all_gather_into_tensor: {n} ranks x {chunk >> 20} MiB, ordered on the current stream, "
      f"verified against torch.cat in {sum(checks)}/{len(checks)} rounds", flush=True)

# 2. A zero-copy tensor over memory ConCCL allocated (DLPack).
buf = dev.alloc_cuda(0, 1 << 20)
view = torch.from_dlpack(buf)
view.copy_(rand_bytes(1 << 20))
torch.cuda.synchronize()
dlpack_ok = buf.download() == view.cpu().numpy().tobytes()
print(f"torch.from_dlpack(Device.alloc_cuda(...)): {view.shape[0]} bytes, the same memory: {dlpack_ok}",
      flush=True)
del view

# 3. C3: the all-gather on copy engines beside a matmul loop on another stream.
mm_stream, ag_stream = torch.cuda.Stream(), torch.cuda.Stream()
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)


def matmuls(k):
    with torch.cuda.stream(mm_stream):
        for _ in range(k):
            x @ x


def gathers(k):
    for _ in range(k):
        comm.all_gather_into_tensor(outputs, inputs, stream=ag_stream)


def timed(*work):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for w in work:
        w()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


timed(lambda: matmuls(20), lambda: gathers(4))  # warm-up
t_one_ag = timed(lambda: gathers(10)) / 10
mm_count = 300
t_mm = timed(lambda: matmuls(mm_count))
ag_count = max(1, round(0.8 * t_mm / t_one_ag))  # all-gathers ending inside the matmuls
t_ag = timed(lambda: gathers(ag_count))
t_both = timed(lambda: matmuls(mm_count), lambda: gathers(ag_count))
ref = torch.cat(inputs)
c3_ok = all(torch.equal(o, ref) for o in outputs)
s_ideal = (t_mm + t_ag) / max(t_mm, t_ag)
s_real = (t_mm + t_ag) / t_both
pct = 100 * (s_real - 1) / (s_ideal - 1)
gbps = ag_count * n * n * chunk / t_ag / 1e9
print(f"C3: matmul 8192^3 bf16 x {mm_count} {t_mm * 1e3:.1f} ms, all-gather x {ag_count} {t_ag * 1e3:.1f} ms "
      f"({gbps:.0f} GB/s moved), both {t_both * 1e3:.1f} ms -> {pct:.1f}% of ideal; verified: {c3_ok}")
dev.release_tensors()
buf.free()
dev.close()  # before CUDA goes away at exit
ok = all(checks) and dlpack_ok and c3_ok
sys.exit(0 if ok else 1)
