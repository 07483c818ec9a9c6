#!/usr/bin/env python3
"""tools/bench/nv_torch_steps.py - the PyTorch path on the nv backend, one part at a
time, so that a failure names the part: each step prints one line (ok / FAILED and
the error), a step that fails does not stop the next ones, and a watchdog ends the
process (a CUDA stream parked on a signal nobody advances would hang it forever).

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH=python \\
    LD_LIBRARY_PATH=<prefix>/lib python3 tools/bench/nv_torch_steps.py
"""
import faulthandler
import os
import sys
import time
import traceback

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
faulthandler.dump_traceback_later(int(os.environ.get("STEPS_WATCHDOG_S", "120")), exit=True)
import torch  # noqa: E402

import conccl  # noqa: E402

torch.cuda.init()
dev = conccl.Device("nv")
N, CHUNK = 4, 4 << 20
results = []


def step(name, fn):
    t0 = time.perf_counter()
    try:
        fn()
        results.append((name, "ok", ""))
        print(f"{name}: ok ({(time.perf_counter() - t0) * 1e3:.1f} ms)", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on
        msg = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        results.append((name, "FAILED", msg))
        print(f"{name}: FAILED: {msg}", flush=True)
        traceback.print_exc(limit=3, file=sys.stderr)


def finished(stream, timeout_s=10):
    """Whether the stream drains within timeout_s (a query loop, never a blocking sync)."""
    end = time.time() + timeout_s
    while time.time() < end:
        if stream.query():
            return True
        time.sleep(0.001)
    return False


comm = conccl.Communicator(dev, [0] * N, loopback=True, timeout_ms=10000)
rand = [os.urandom(CHUNK) for _ in range(N)]
own_send = [dev.alloc_cuda(0, CHUNK) for _ in range(N)]
own_recv = [dev.alloc_cuda(0, CHUNK * N) for _ in range(N)]
for r in range(N):
    own_send[r].upload(rand[r])


def own_blocking():
    comm.all_gather(own_send, own_recv, CHUNK)
    bad = sum(own_recv[r].download() != b"".join(rand) for r in range(N))
    assert bad == 0, f"{bad} ranks wrong"


def own_plan_released_by_stream():
    plan = comm.plan("all_gather", CHUNK, own_send, own_recv, prelaunch=True)
    s = torch.cuda.Stream()
    plan.enqueue_on_stream(s)
    assert finished(s), "the stream did not drain: the plan's arrivals never reached it"
    plan.wait(timeout_ms=5000)


def torch_tensors_blocking():
    ins = [torch.randint(0, 256, (CHUNK,), dtype=torch.uint8, device="cuda") for _ in range(N)]
    outs = [torch.zeros(N * CHUNK, dtype=torch.uint8, device="cuda") for _ in range(N)]
    torch.cuda.synchronize()
    send = [dev._tensor_buffer(t, 0) for t in ins]
    recv = [dev._tensor_buffer(t, 0) for t in outs]
    comm.all_gather(send, recv, CHUNK)
    ref = torch.cat(ins)
    assert all(torch.equal(o, ref) for o in outs), "registered tensors: wrong bytes"


def torch_on_stream(stream_kind):
    def run():
        ins = [torch.randint(0, 256, (CHUNK,), dtype=torch.uint8, device="cuda") for _ in range(N)]
        outs = [torch.zeros(N * CHUNK, dtype=torch.uint8, device="cuda") for _ in range(N)]
        torch.cuda.synchronize()
        s = torch.cuda.Stream() if stream_kind == "side" else torch.cuda.current_stream()
        with torch.cuda.stream(s):
            comm.all_gather_into_tensor(outs, ins)
        assert finished(s), f"the {stream_kind} stream did not drain"
        ref = torch.cat(ins)
        assert all(torch.equal(o, ref) for o in outs), "wrong bytes"
    return run


step("own CUDA buffers, blocking all_gather", own_blocking)
step("own CUDA buffers, plan released by a torch stream", own_plan_released_by_stream)
step("torch tensors registered, blocking all_gather", torch_tensors_blocking)
step("torch tensors, all_gather_into_tensor on a side stream", torch_on_stream("side"))
step("torch tensors, all_gather_into_tensor on the default stream", torch_on_stream("default"))
failed = [r for r in results if r[1] != "ok"]
print(f"steps: {len(results) - len(failed)}/{len(results)} ok", flush=True)
os._exit(1 if failed else 0)  # skip teardown: a parked stream would hang it
