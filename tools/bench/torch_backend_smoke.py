#!/usr/bin/env python3
"""tools/bench/torch_backend_smoke.py - the "conccl" torch.distributed backend end to end,
one line per check: PASS, FAIL with the error, or SKIP with the reason.

N processes from torch.multiprocessing.spawn (no torchrun), rendezvous through a
FileStore, every rank running the same checks in the same order; a failing check
is recorded and the next one runs. Nothing waits forever: init_process_group's
timeout bounds each collective (ConCCL's communicator timeout), each worker dumps
its stack and exits at the deadline (faulthandler), and the parent kills the
workers it started once the deadline has passed; a check a rank did not finish is
reported as FAIL (timed out or died).

GPU machine (torch 2.x with CUDA; every rank on cuda:0, as the nv backend opens
the device's GPU 0 with loopback):
    CONCCL_BACKEND=nv PYTHONPATH=python CONCCL_LIBRARY=<build>/src/libconccl.so \\
        python3 tools/bench/torch_backend_smoke.py --nprocs 2
Without a GPU (the emulated node, CPU tensors; e.g. Debian's torch 1.13):
    CONCCL_BACKEND=emu PYTHONPATH=python CONCCL_LIBRARY=build/src/libconccl.so \\
        /usr/bin/python3 tools/bench/torch_backend_smoke.py --nprocs 4

Options: --nprocs N (2), --timeout S (collective timeout, 60), --deadline S (whole
run, 300), --cuda-device I (0), --device-id (nv, torch >= 2.3: init_process_group gets
device_id=cuda:I, as torch's own docs now advise). Exit status 0 when no check failed.

Checks: the ops (all_reduce, all_gather_into_tensor and its in-place form that
FSDP2 uses, reduce_scatter_tensor, broadcast, all_to_all_single even and uneven,
barrier, async_op Work), a sub-group, send/recv and batch_isend_irecv, object
collectives, the coalesced calls and _coalescing_manager,
the functional collectives (torch 2.x: they enter the group from C++, through
the PyProcessGroup trampoline, and show which overrides that reaches), a DDP
step, an FSDP2 step (torch.distributed.fsdp.fully_shard, when torch has it), and ops
captured in a CUDA graph and replayed (nv only).

The DDP and FSDP2 steps are compared with a single-process reference computed in
every worker: the same model (same seed) unsharded, run on each rank's batch in
turn, the per-rank gradients averaged in float32 in rank order. That is what a
data-parallel step must produce (each rank's loss is the mean over its own equal
batch, so the average of the ranks' gradients is the gradient of the global
mean), it needs no second backend, and it runs on the same device, dtype and
kernels as the conccl run (a gloo run would be on CPU tensors, other kernels, so
only a loose tolerance could compare them). FSDP2 runs in bfloat16 (parameters,
gradients and its AVG reduce-scatter): the reference runs the same bf16 forward
and backward on the same (all-gathered) parameters, so losses agree to float32
rounding and gradient shards to about one bf16 rounding of the average.
"""
import argparse
import copy
import faulthandler
import importlib
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

_PY = Path(__file__).resolve().parent.parent.parent / "python"  # the repository's python/
if (_PY / "conccl").is_dir() and str(_PY) not in sys.path:
    sys.path.append(str(_PY))  # after PYTHONPATH: an explicit one wins

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


class Skip(Exception):
    pass


def _close(got, want, what, rtol=0.0, atol=0.0):
    got, want = got.detach().float().cpu(), want.detach().float().cpu()
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if not torch.allclose(got, want, rtol=rtol, atol=atol):
        diff = (got - want).abs()
        i = int(diff.reshape(-1).argmax())
        raise AssertionError(f"{what}: max |diff| {float(diff.max()):.3g} at flat index {i} "
                             f"(got {float(got.reshape(-1)[i])}, expected {float(want.reshape(-1)[i])})")


# ---- the checks: each runs on every rank, raises on a wrong result ----

def check_group_attributes(c):
    pg = dist.distributed_c10d._get_default_group()
    if dist.get_backend() != "conccl":
        raise AssertionError(f"dist.get_backend() is {dist.get_backend()!r}")
    if pg.name() != "conccl":
        raise AssertionError(f"pg.name() is {pg.name()!r}")
    if (pg.rank(), pg.size()) != (c.rank, c.n):
        raise AssertionError(f"pg.rank(), pg.size() are {pg.rank()}, {pg.size()}")
    resolve = getattr(dist.distributed_c10d, "_resolve_process_group", None)
    if resolve is not None:  # torch 2.x: DeviceMesh and the functional collectives go by name
        name = pg.group_name
        if not name:
            raise AssertionError("pg.group_name is empty")
        if resolve(name) is not pg:  # DeviceMesh (FSDP2's mesh) finds its group so
            raise AssertionError(f"_resolve_process_group({name!r}) is {type(resolve(name))}, not this "
                                 "ProcessGroupConccl object")


def check_all_reduce_sum(c):
    t = torch.arange(1000, dtype=torch.float32, device=c.dev) + c.rank
    dist.all_reduce(t)
    _close(t, torch.arange(1000, dtype=torch.float32) * c.n + c.n * (c.n - 1) / 2, "sum")


def check_all_reduce_avg_bf16(c):
    t = torch.full((64,), float(c.rank + 1), dtype=torch.bfloat16, device=c.dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    _close(t, torch.full((64,), (c.n + 1) / 2), "avg")


def check_all_reduce_other_dtypes(c):
    # float64, int8 and bool: types the reduce step does not take (moves, then torch kernels)
    t = torch.arange(100, dtype=torch.float64, device=c.dev) * (c.rank + 1)
    dist.all_reduce(t)
    _close(t, torch.arange(100, dtype=torch.float64) * (c.n * (c.n + 1) // 2), "float64 sum")
    t = torch.full((33,), c.rank - 1, dtype=torch.int8, device=c.dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    _close(t, torch.full((33,), -1), "int8 min")
    t = torch.tensor([c.rank == 0, False], device=c.dev)
    dist.all_reduce(t)  # SUM of bools: or
    _close(t, torch.tensor([True, False]), "bool sum")


def check_pool(c):
    # tensors of the group's pool go in without staging (group stats count them)
    import conccl.torch as ct
    pg = dist.distributed_c10d._get_default_group()
    if type(pg).__name__ == "HierarchicalGroup":
        raise Skip("a group across nodes (CONCCL_RANKS_PER_NODE) has no pool of its own")
    pool = ct.group_pool()
    before = pg.stats()
    k = 1 << 16
    use = getattr(torch.cuda, "use_mem_pool", None) if c.dev.type == "cuda" else None
    if use is not None:  # torch >= 2.5: the caching allocator carves them from the heap
        with use(pool.mempool):
            inp = torch.empty(k, device=c.dev)
            out = torch.empty(c.n * k, device=c.dev)
    else:
        inp, out = pool.empty(k, dtype=torch.float32), pool.empty(c.n * k, dtype=torch.float32)
    inp.copy_(torch.arange(k, dtype=torch.float32, device=c.dev) + c.rank * k)
    dist.all_gather_into_tensor(out, inp)
    _close(out, torch.arange(c.n * k, dtype=torch.float32), "pool all_gather_into_tensor")
    dist.all_reduce(inp)
    _close(inp, sum(torch.arange(k, dtype=torch.float32) + r * k for r in range(c.n)), "pool all_reduce")
    after = pg.stats()
    if after["direct_calls"] - before["direct_calls"] != 2 or after["staged_ops"] != before["staged_ops"]:
        raise AssertionError(f"stats() went from {before} to {after}: expected 2 direct calls, none staged")
    del inp, out


def check_async_work(c):
    t = torch.ones(16, device=c.dev) * (c.rank + 1)
    w = dist.all_reduce(t, async_op=True)
    if not isinstance(w, dist.Work):
        raise AssertionError(f"async_op=True returned {type(w)}, not a torch.distributed.Work")
    w.wait()
    if not w.is_completed():
        raise AssertionError("is_completed() is False after wait()")
    w.get_future().wait()
    _close(t, torch.full((16,), c.n * (c.n + 1) / 2), "all_reduce result")
    out = torch.empty(4 * c.n, device=c.dev)
    w = dist.all_gather_into_tensor(out, torch.full((4,), float(c.rank), device=c.dev), async_op=True)
    w.wait()
    _close(out, torch.arange(c.n).repeat_interleave(4).float(), "all_gather_into_tensor result")


def check_all_gather_into_tensor(c):
    k = 37
    inp = torch.arange(k, dtype=torch.float32, device=c.dev) + 100 * c.rank
    out = torch.empty(c.n * k, device=c.dev)
    dist.all_gather_into_tensor(out, inp)
    _close(out, torch.cat([torch.arange(k) + 100 * r for r in range(c.n)]).float(), "output")
    out2 = torch.empty(c.n, k, dtype=torch.int64, device=c.dev)  # the stacked form
    dist.all_gather_into_tensor(out2, inp.long())
    _close(out2, torch.stack([torch.arange(k) + 100 * r for r in range(c.n)]), "stacked output")


def check_all_gather_in_place(c):
    # FSDP2's form (_fsdp_collectives.foreach_all_gather): the input is this rank's slice
    # of the output.
    k = 24
    out = torch.zeros(c.n * k, dtype=torch.bfloat16, device=c.dev)
    inp = out.narrow(0, c.rank * k, k)
    inp.copy_(torch.arange(k, dtype=torch.bfloat16) + 32 * c.rank)
    dist.all_gather_into_tensor(out, inp)
    _close(out, torch.cat([torch.arange(k) + 32 * r for r in range(c.n)]).float(), "output")


def check_reduce_scatter_sum(c):
    k = 40
    inp = torch.arange(c.n * k, dtype=torch.float32, device=c.dev) + c.rank
    out = torch.empty(k, device=c.dev)
    dist.reduce_scatter_tensor(out, inp)
    want = (torch.arange(c.rank * k, (c.rank + 1) * k) * c.n + c.n * (c.n - 1) / 2).float()
    _close(out, want, "output")


def check_reduce_scatter_avg_bf16(c):
    k = 16
    inp = torch.full((c.n * k,), float(c.rank + 1), dtype=torch.bfloat16, device=c.dev)
    out = torch.empty(k, dtype=torch.bfloat16, device=c.dev)
    dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
    _close(out, torch.full((k,), (c.n + 1) / 2), "output")


def check_broadcast(c):
    src = c.n - 1
    t = torch.full((9,), float(c.rank), device=c.dev)
    dist.broadcast(t, src)
    _close(t, torch.full((9,), float(src)), "tensor")


def check_all_to_all_equal(c):
    k = 5
    inp = torch.arange(c.n * k, dtype=torch.float32, device=c.dev) + 1000 * c.rank
    out = torch.empty(c.n * k, device=c.dev)
    dist.all_to_all_single(out, inp)
    want = torch.cat([torch.arange(c.rank * k, (c.rank + 1) * k) + 1000 * s for s in range(c.n)]).float()
    _close(out, want, "output")


def check_all_to_all_uneven(c):
    # rank s sends s + 1 rows of 3 to every rank
    ins = [c.rank + 1] * c.n
    outs = [s + 1 for s in range(c.n)]
    inp = (torch.arange(sum(ins) * 3, dtype=torch.float32, device=c.dev) + 1000 * c.rank).view(-1, 3)
    out = torch.empty(sum(outs), 3, device=c.dev)
    dist.all_to_all_single(out, inp, outs, ins)
    want = torch.cat([(torch.arange((s + 1) * c.n * 3) + 1000 * s).view(-1, 3)[c.rank * (s + 1):(c.rank + 1) * (s + 1)]
                      for s in range(c.n)]).float()
    _close(out, want, "output")


def check_barrier(c):
    dist.barrier()


def check_new_group(c):
    if c.n < 2:
        raise Skip("needs 2 processes")
    sub = dist.new_group([0, 1])  # every rank calls new_group
    if c.rank < 2:
        t = torch.ones(3, device=c.dev) * (c.rank + 1)
        dist.all_reduce(t, group=sub)
        _close(t, torch.full((3,), 3.0), "sub-group all_reduce")
        out = torch.empty(4, device=c.dev)
        dist.all_gather_into_tensor(out, torch.full((2,), float(c.rank), device=c.dev), group=sub)
        _close(out, torch.tensor([0.0, 0, 1, 1]), "sub-group all_gather_into_tensor")


def check_p2p(c):
    if c.n < 2:
        raise Skip("needs 2 processes")
    nxt, prv = (c.rank + 1) % c.n, (c.rank - 1) % c.n
    got = torch.empty(3, device=c.dev)
    dist.send(torch.full((3,), float(c.rank), device=c.dev), nxt)
    dist.recv(got, prv)
    _close(got, torch.full((3,), float(prv)), "recv")
    got = torch.empty(2, device=c.dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((2,), 10.0 + c.rank, device=c.dev), nxt),
                                   dist.P2POp(dist.irecv, got, prv)])
    for w in reqs:
        w.wait()
    _close(got, torch.full((2,), 10.0 + prv), "batch_isend_irecv")


def check_object_collectives(c):
    got = [None] * c.n
    dist.all_gather_object(got, {"rank": c.rank, "s": "x" * c.rank})
    if got != [{"rank": r, "s": "x" * r} for r in range(c.n)]:
        raise AssertionError(f"all_gather_object: {got}")
    objs = [{"from": c.rank}, [c.rank] * 3]
    dist.broadcast_object_list(objs, src=0)
    if objs != [{"from": 0}, [0, 0, 0]]:
        raise AssertionError(f"broadcast_object_list: {objs}")


def check_coalesced_methods(c):
    # What _coalescing_manager and the functional collectives call on the group.
    pg = dist.distributed_c10d._get_default_group()
    ts = [torch.ones(5, device=c.dev) * (c.rank + 1), torch.ones(3, device=c.dev)]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    pg.allreduce_coalesced(ts, opts).wait()
    _close(ts[0], torch.full((5,), c.n * (c.n + 1) / 2), "allreduce_coalesced[0]")
    _close(ts[1], torch.full((3,), float(c.n)), "allreduce_coalesced[1]")
    ins = [torch.full((2,), float(c.rank), device=c.dev), torch.full((3,), 10.0 + c.rank, device=c.dev)]
    outs = [torch.empty(2 * c.n, device=c.dev), torch.empty(3 * c.n, device=c.dev)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    _close(outs[0], torch.arange(c.n).repeat_interleave(2).float(), "allgather_into_tensor_coalesced[0]")
    _close(outs[1], (torch.arange(c.n).repeat_interleave(3) + 10).float(), "allgather_into_tensor_coalesced[1]")
    ins = [torch.ones(2 * c.n, device=c.dev) * (c.rank + 1), torch.arange(c.n, dtype=torch.float32, device=c.dev)]
    outs = [torch.empty(2, device=c.dev), torch.empty(1, device=c.dev)]
    ropts = dist.ReduceScatterOptions()
    ropts.reduceOp = dist.ReduceOp.SUM
    pg.reduce_scatter_tensor_coalesced(outs, ins, ropts).wait()
    _close(outs[0], torch.full((2,), c.n * (c.n + 1) / 2), "reduce_scatter_tensor_coalesced[0]")
    _close(outs[1], torch.full((1,), float(c.rank * c.n)), "reduce_scatter_tensor_coalesced[1]")


def check_coalescing_manager(c):
    cm_fn = getattr(dist.distributed_c10d, "_coalescing_manager", None)
    if cm_fn is None or "async_ops" not in inspect.signature(cm_fn).parameters:
        raise Skip("this torch has no _coalescing_manager(group, device, async_ops)")
    outs = [torch.empty(2 * c.n, device=c.dev), torch.empty(c.n, device=c.dev)]
    with cm_fn(async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], torch.full((2,), float(c.rank), device=c.dev))
        dist.all_gather_into_tensor(outs[1], torch.full((1,), 5.0 + c.rank, device=c.dev))
    cm.wait()
    _close(outs[0], torch.arange(c.n).repeat_interleave(2).float(), "first all_gather_into_tensor")
    _close(outs[1], torch.arange(c.n).float() + 5, "second all_gather_into_tensor")


def _funcol():
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError as e:
        raise Skip(f"no torch.distributed._functional_collectives ({e})")
    if not hasattr(funcol, "all_gather_tensor"):
        raise Skip("this torch's functional collectives lack all_gather_tensor")
    return funcol


def check_funcol_all_reduce(c):
    funcol = _funcol()
    pg = dist.distributed_c10d._get_default_group()
    t = funcol.all_reduce(torch.ones(6, device=c.dev) * (c.rank + 1), "sum", pg)
    _close(funcol.wait_tensor(t) if hasattr(funcol, "wait_tensor") else t, torch.full((6,), c.n * (c.n + 1) / 2),
           "all_reduce")


def check_funcol_all_gather(c):
    funcol = _funcol()
    pg = dist.distributed_c10d._get_default_group()
    t = funcol.all_gather_tensor(torch.full((2, 3), float(c.rank), device=c.dev), 0, pg)
    t = funcol.wait_tensor(t) if hasattr(funcol, "wait_tensor") else t
    _close(t, torch.arange(c.n).repeat_interleave(2).float().view(-1, 1).expand(-1, 3), "all_gather_tensor")


def check_funcol_reduce_scatter(c):
    funcol = _funcol()
    pg = dist.distributed_c10d._get_default_group()
    t = funcol.reduce_scatter_tensor(torch.ones(2 * c.n, device=c.dev) * (c.rank + 1), "sum", 0, pg)
    t = funcol.wait_tensor(t) if hasattr(funcol, "wait_tensor") else t
    _close(t, torch.full((2,), c.n * (c.n + 1) / 2), "reduce_scatter_tensor")


def _batch(c, r, rows, cols, dtype):
    g = torch.Generator().manual_seed(1000 + r)
    return torch.randn(rows, cols, generator=g).to(c.dev, dtype)


def _reference_grads(c, model, loss_fn, batches):
    """The unsharded model's gradients on every rank's batch, averaged in float32 in rank
    order and cast back to the parameters' dtype, and each rank's loss."""
    sums, losses = {}, []
    for x in batches:
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model, x)
        loss.backward()
        losses.append(loss.detach())
        for name, p in model.named_parameters():
            sums[name] = sums.get(name, 0) + p.grad.float()
    return {name: (s / c.n).to(dict(model.named_parameters())[name].dtype) for name, s in sums.items()}, losses


def check_ddp(c):
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).to(c.dev)
    ref = copy.deepcopy(model)

    def loss_fn(m, x):
        return m(x).pow(2).mean()

    ddp = DDP(model, device_ids=[c.dev.index] if c.dev.type == "cuda" else None)
    batches = [_batch(c, r, 6, 8, torch.float32) for r in range(c.n)]
    loss = loss_fn(ddp, batches[c.rank])
    loss.backward()
    want, losses = _reference_grads(c, ref, loss_fn, batches)
    _close(loss, losses[c.rank], "loss", rtol=1e-6, atol=1e-7)
    for name, p in model.named_parameters():
        _close(p.grad, want[name], f"grad of {name}", rtol=1e-5, atol=1e-6)


def _fully_shard():
    errors = []
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):  # 2.6+, 2.4-2.5
        try:
            return getattr(__import__(where, fromlist=["fully_shard"]), "fully_shard")
        except Exception as e:  # noqa: BLE001 - ImportError, AttributeError; 1.13 on Python 3.11 a ValueError
            errors.append(f"{where}: {type(e).__name__}: {' '.join(str(e).split())[:120]}")
    raise Skip(f"torch {torch.__version__} has no FSDP2 fully_shard ({'; '.join(errors)})")


def check_fsdp2(c, custom_comms=False):
    fully_shard = _fully_shard()
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(c.dev.type, (c.n,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    model = model.to(c.dev, torch.bfloat16)
    ref = copy.deepcopy(model)
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    comms = None
    if custom_comms:  # FSDP's buffers from the group's pool (CONCCL_TORCH_POOL_BYTES, set by the worker)
        if not hasattr(model, "set_custom_all_gather"):
            raise Skip(f"torch {torch.__version__} has no FSDPModule.set_custom_all_gather (2.8 and later have)")
        import conccl.torch as ct
        comms = ct.FSDPAllGather(mesh.get_group()), ct.FSDPReduceScatter(mesh.get_group())
        for m in (model[0], model[2], model):
            m.set_custom_all_gather(comms[0])
            m.set_custom_reduce_scatter(comms[1])

    def loss_fn(m, x):
        return m(x).float().pow(2).mean()

    batches = [_batch(c, r, 4, 16, torch.bfloat16) for r in range(c.n)]
    lr = 0.1
    for step in range(2):  # a step, an SGD update, a second step on the updated shards
        loss = loss_fn(model, batches[c.rank])
        loss.backward()
        want, losses = _reference_grads(c, ref, loss_fn, batches)
        _close(loss, losses[c.rank], f"step {step}: loss", rtol=1e-3, atol=1e-5)
        for name, p in model.named_parameters():
            local = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            chunks = torch.chunk(want[name], c.n, dim=0)
            mine = chunks[c.rank] if c.rank < len(chunks) else want[name][:0]
            _close(local, mine, f"step {step}: grad shard of {name}", rtol=1e-2, atol=1e-3)
        with torch.no_grad():
            for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                p.add_(p.grad, alpha=-lr)
                q.add_(want[name], alpha=-lr)
        model.zero_grad(set_to_none=True)
    if comms is not None:
        ag, rs = comms
        if not (ag.calls and rs.calls and ag.pool_tensors and rs.pool_tensors):
            raise AssertionError(f"custom comms: {ag.calls} all-gathers, {rs.calls} reduce-scatters, buffers from the "
                                 f"pool {ag.pool_tensors} + {rs.pool_tensors}: FSDP did not go through them")


def check_fsdp2_custom_comms(c):
    check_fsdp2(c, custom_comms=True)


def check_cuda_graph(c):
    # torch.cuda.graph around the ops (docs/graphs.md): an all-gather of a plain
    # tensor (staged through the group's window) and an all-reduce, captured once,
    # replayed with new inputs each time, every element checked.
    if c.dev.type != "cuda":
        raise Skip("CUDA graphs need CUDA tensors (CONCCL_BACKEND=nv)")
    k = 1000
    base = torch.arange(k, dtype=torch.float32, device=c.dev)
    src = base * (c.rank + 1)
    gathered = torch.empty(c.n * k, device=c.dev)
    summed = torch.empty(k, device=c.dev)

    def step():
        dist.all_gather_into_tensor(gathered, src)
        summed.copy_(src)
        dist.all_reduce(summed)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch asks
        step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    tri = c.n * (c.n + 1) / 2
    for rep in range(1, 51):
        src.copy_(base * (c.rank + 1) + rep)
        g.replay()
        _close(gathered, torch.cat([base * (r + 1) + rep for r in range(c.n)]), f"replay {rep}: all-gather")
        _close(summed, base * tri + rep * c.n, f"replay {rep}: all-reduce")
    del g
    # send/recv cannot be captured: refused at the call, naming it, and the stream goes on.
    g2 = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g2):
            dist.send(src, (c.rank + 1) % c.n)
        raise AssertionError("a send inside a CUDA graph capture was taken")
    except RuntimeError as e:
        if "captured into a CUDA graph" not in str(e):
            raise
    del g2
    t = torch.ones(4, device=c.dev)
    dist.all_reduce(t)
    _close(t, torch.full((4,), float(c.n)), "all-reduce after the refused capture")


def check_destroy(c):
    dist.destroy_process_group()


CHECKS = [
    ("group attributes (backend name, rank, size, group_name)", check_group_attributes),
    ("all_reduce SUM float32", check_all_reduce_sum),
    ("all_reduce AVG bfloat16", check_all_reduce_avg_bf16),
    ("all_reduce float64, int8, bool", check_all_reduce_other_dtypes),
    ("tensors of group_pool() skip the staging", check_pool),
    ("async_op=True: Work.wait, is_completed, get_future", check_async_work),
    ("all_gather_into_tensor (flat and stacked)", check_all_gather_into_tensor),
    ("all_gather_into_tensor in place (FSDP2's form)", check_all_gather_in_place),
    ("reduce_scatter_tensor SUM float32", check_reduce_scatter_sum),
    ("reduce_scatter_tensor AVG bfloat16", check_reduce_scatter_avg_bf16),
    ("broadcast", check_broadcast),
    ("all_to_all_single equal splits", check_all_to_all_equal),
    ("all_to_all_single uneven splits", check_all_to_all_uneven),
    ("barrier", check_barrier),
    ("new_group([0, 1])", check_new_group),
    ("send/recv, batch_isend_irecv", check_p2p),
    ("all_gather_object, broadcast_object_list", check_object_collectives),
    ("coalesced calls on the group", check_coalesced_methods),
    ("_coalescing_manager", check_coalescing_manager),
    ("functional all_reduce (C++ -> group)", check_funcol_all_reduce),
    ("functional all_gather_tensor (C++ -> group)", check_funcol_all_gather),
    ("functional reduce_scatter_tensor (C++ -> group)", check_funcol_reduce_scatter),
    ("DDP step vs single-process reference", check_ddp),
    ("FSDP2 bf16 steps vs single-process reference", check_fsdp2),
    ("FSDP2 through conccl.torch.FSDPAllGather / FSDPReduceScatter, pooled buffers", check_fsdp2_custom_comms),
    ("CUDA graph: all_gather_into_tensor + all_reduce, 50 replays", check_cuda_graph),
    ("destroy_process_group", check_destroy),
]


class _Ctx:
    pass


def _worker(rank, n, kind, store_path, out_dir, timeout_s, deadline_s, cuda_device, device_id):
    faulthandler.dump_traceback_later(max(5, deadline_s - 5), exit=True)
    os.environ["CONCCL_BACKEND"] = kind
    os.environ.setdefault("CONCCL_TORCH_POOL_BYTES", str(16 << 20))  # room for check_pool's tensors
    log = open(os.path.join(out_dir, f"rank{rank}.jsonl"), "a", buffering=1)

    def record(name, status, msg=""):
        log.write(json.dumps({"check": name, "status": status, "msg": msg}) + "\n")

    def error_text(e):
        text = f"{type(e).__name__}: {e}".strip()
        where = traceback.extract_tb(e.__traceback__)
        if where:
            text += f" [at {os.path.basename(where[-1].filename)}:{where[-1].lineno}]"
        return " ".join(text.split())[:600]

    c = _Ctx()
    c.rank, c.n = rank, n
    name = "import conccl.torch, init_process_group(\"conccl\")"
    record(name, "START")
    try:
        if kind == "nv":
            torch.cuda.set_device(cuda_device)
            c.dev = torch.device("cuda", cuda_device)
        else:
            c.dev = torch.device("cpu")
        importlib.import_module("conccl.torch")  # registers "conccl"
        store = dist.FileStore(store_path, n)
        kw = {"device_id": c.dev} if device_id else {}  # torch >= 2.3 (checked in main)
        dist.init_process_group("conccl", store=store, rank=rank, world_size=n,
                                timeout=timedelta(seconds=timeout_s), **kw)
        record(name, "PASS")
    except Exception as e:  # noqa: BLE001 - reported, nothing else can run
        record(name, "FAIL", error_text(e))
        return
    for name, fn in CHECKS:
        record(name, "START")
        try:
            fn(c)
            record(name, "PASS")
        except Skip as e:
            record(name, "SKIP", str(e))
        except Exception as e:  # noqa: BLE001 - reported; the next check runs
            record(name, "FAIL", error_text(e))
    log.close()


def _report(out_dir, n):
    per_rank = []
    for r in range(n):
        path = os.path.join(out_dir, f"rank{r}.jsonl")
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        per_rank.append([json.loads(x) for x in lines if x.strip()])
    order = []
    for recs in per_rank:
        for rec in recs:
            if rec["check"] not in order:
                order.append(rec["check"])
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for name in order:
        status, msgs = {}, {}
        for r, recs in enumerate(per_rank):
            mine = [rec for rec in recs if rec["check"] == name]
            final = [rec for rec in mine if rec["status"] != "START"]
            if final:
                status[r], msgs[r] = final[-1]["status"], final[-1]["msg"]
            elif mine:
                status[r], msgs[r] = "FAIL", "did not finish it (timed out or died)"
            else:
                status[r], msgs[r] = "FAIL", "never reached it"
        failed = [r for r in range(n) if status[r] == "FAIL"]
        if failed:
            r = failed[0]
            more = f" (and {len(failed) - 1} more ranks)" if len(failed) > 1 else ""
            print(f"FAIL  {name}: rank {r}{more}: {msgs[r]}", flush=True)
            counts["FAIL"] += 1
        elif all(status[r] == "PASS" for r in range(n)):
            print(f"PASS  {name}", flush=True)
            counts["PASS"] += 1
        else:
            r = next(r for r in range(n) if status[r] == "SKIP")
            print(f"SKIP  {name}: {msgs[r]}", flush=True)
            counts["SKIP"] += 1
    expected = 1 + len(CHECKS)
    if len(order) < expected:
        print(f"FAIL  {expected - len(order)} checks never started on any rank", flush=True)
        counts["FAIL"] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="init_process_group timeout, seconds")
    ap.add_argument("--deadline", type=float, default=300.0, help="the whole run, seconds")
    ap.add_argument("--cuda-device", type=int, default=0)
    ap.add_argument("--device-id", action="store_true",
                    help="init_process_group(..., device_id=torch.device('cuda', I)) (nv, torch >= 2.3)")
    args = ap.parse_args()
    kind = os.environ.get("CONCCL_BACKEND") or ("nv" if torch.cuda.is_available() else "emu")
    n = args.nprocs
    if args.device_id and (kind != "nv" or "device_id" not in inspect.signature(dist.init_process_group).parameters):
        sys.exit(f"--device-id: needs CONCCL_BACKEND=nv and torch >= 2.3 (init_process_group's device_id); "
                 f"this is {kind}, torch {torch.__version__}")
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, CONCCL_BACKEND={kind}, {n} processes, "
          f"{'cuda:%d' % args.cuda_device if kind == 'nv' else 'cpu'} tensors{', device_id' if args.device_id else ''}, deadline {args.deadline:.0f} s",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="conccl_smoke_") as tmp:
        t0 = time.time()
        ctx = mp.spawn(_worker, args=(n, kind, os.path.join(tmp, "store"), tmp, args.timeout, args.deadline,
                                      args.cuda_device, args.device_id), nprocs=n, join=False)
        died = None
        while True:
            try:
                if ctx.join(timeout=0.5):
                    break
            except Exception as e:  # noqa: BLE001 - a worker crashed; torch ends the others
                died = " ".join(str(e).split())[:400]
                break
            if time.time() - t0 > args.deadline:
                died = f"deadline of {args.deadline:.0f} s passed: workers killed"
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                for p in ctx.processes:
                    p.join(5)
                break
        counts = _report(tmp, n)
        if died:
            print(f"FAIL  workers: {died}", flush=True)
            counts["FAIL"] += 1
        print(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
              f"({time.time() - t0:.1f} s)", flush=True)
    sys.exit(1 if counts["FAIL"] else 0)


if __name__ == "__main__":
    main()
