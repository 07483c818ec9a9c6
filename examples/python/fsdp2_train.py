#!/usr/bin/env python3
"""examples/python/fsdp2_train.py - train a small transformer with FSDP2 (or DDP) on
the "conccl" torch.distributed backend: every all-gather, reduce-scatter and
all-reduce of the training step runs on the DMA engines.

    torchrun --nproc_per_node 2 examples/python/fsdp2_train.py              # FSDP2 on CUDA
    torchrun --nproc_per_node 4 examples/python/fsdp2_train.py --mode ddp
    CONCCL_BACKEND=emu torchrun --nproc_per_node 2 examples/python/fsdp2_train.py --mode ddp --device cpu
(`python3 -m torch.distributed.run` where there is no `torchrun` on the PATH.) Without a
launcher, --nprocs N starts the N ranks itself (env:// on 127.0.0.1, as torchrun
would); Debian 12's torch 1.13 needs that, its torchrun fails on Python 3.11:
    CONCCL_BACKEND=emu python3 examples/python/fsdp2_train.py --nprocs 2 --mode ddp --device cpu

The library is found as the conccl package finds it: PYTHONPATH=python and
CONCCL_LIBRARY=<build>/src/libconccl.so from the repository, or the installed
package. Rank r runs on GPU LOCAL_RANK % torch.cuda.device_count(): several ranks
may share one GPU (the nv backend runs them as loopback ranks of that GPU).

FSDP2 (torch.distributed.fsdp.fully_shard, torch >= 2.4): each transformer block
and the root are sharded; parameters are kept in float32, gathered and computed
in bfloat16, and gradients reduce-scattered in float32 (MixedPrecisionPolicy).
DDP (any torch): the same model in float32, gradients all-reduced.

--check trains, in every process and with no collective, the reference that the
step must equal: the same model from the same seed, run on every rank's batch in
turn, the per-rank gradients combined in rank order in float32 as the collective
defines them (FSDP2: reduce-scatter AVG, the sum over ranks 0..n-1 divided by n;
DDP: each gradient scaled by 1/n, then summed in rank order), the same optimizer.
ConCCL reduces in rank order with float32 arithmetic (docs/reductions.md), so
every step's loss and the final parameters must be equal bit for bit; the run
exits 1 otherwise, printing the largest difference.

Options: --mode fsdp2|ddp, --device cuda|cpu, --steps 50, --layers 4, --dim 256,
--heads 4, --seq 128, --batch 8, --vocab 512, --lr 1e-3, --seed 0, --check,
--per-tensor-update (AdamW with foreach=False; torch's default otherwise),
--backend NAME (conccl; another registered backend to compare with, e.g. nccl),
--fsdp-comms conccl (FSDP2: the group on --backend, e.g. nccl or gloo, and FSDP's
all-gathers and reduce-scatters on the DMA engines through conccl.torch.FSDPAllGather and
FSDPReduceScatter, FSDPModule.set_custom_all_gather / set_custom_reduce_scatter),
--json FILE (rank 0: losses per step, step times, the check's result), --nprocs N,
--compute-baseline ITERS (then time the step's forward and backward alone, no
collective, every rank at once: step time over that is what the collectives cost),
--profile-gemm STEPS (CUDA: the GEMM kernels' device time per step, in the step and
alone; their ratio is the GEMM slowdown the collectives cause).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import conccl.torch  # noqa: F401 - registers the "conccl" backend


class Block(nn.Module):
    """Pre-norm transformer block; attention written out (matmul, softmax) so that its
    backward is deterministic, which the bit-for-bit check relies on."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, heads, layers, seq):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos[:tokens.shape[1]].to(self.emb.weight.dtype)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def loss_of(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def batch(a, step, rank, device):
    """Rank `rank`'s batch of step `step`: sequences that count up by a stride, so the
    loss has something to learn; the same on every process that asks."""
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + step * 1009 + rank)
    start = torch.randint(a.vocab, (a.batch, 1), generator=g)
    stride = torch.randint(1, 8, (a.batch, 1), generator=g)
    return ((start + stride * torch.arange(a.seq + 1)) % a.vocab).to(device)


def make_model(a, device):
    torch.manual_seed(a.seed)
    return TinyLM(a.vocab, a.dim, a.heads, a.layers, a.seq).to(device)


def optimizer(params, a):
    # AdamW's update is elementwise, so a shard's update equals the same elements of the
    # whole tensor's (the check compares them bit for bit) in either implementation:
    # torch's default (foreach: a few kernels over all tensors; on FSDP2's DTensors the
    # per-tensor form costs a DTensor dispatch per operation and parameter, tens of ms
    # per step for this model) or --per-tensor-update.
    return torch.optim.AdamW(params, lr=a.lr, foreach=False if a.per_tensor_update else None)


def custom_comms(model, group):
    """FSDP2's all-gather and reduce-scatter on the DMA engines (conccl.torch.FSDPAllGather,
    FSDPReduceScatter) while the process group stays on --backend: every FSDP module gets
    them (FSDPModule.set_custom_all_gather / set_custom_reduce_scatter, torch >= 2.8). Made
    with the mesh's group, they carve FSDP's buffers from its companion's pool when
    CONCCL_TORCH_POOL_BYTES gives it room (then nothing is staged)."""
    ag, rs = conccl.torch.FSDPAllGather(group), conccl.torch.FSDPReduceScatter(group)
    for m in list(model.blocks) + [model]:
        if not hasattr(m, "set_custom_all_gather"):
            raise SystemExit(f"--fsdp-comms conccl needs FSDPModule.set_custom_all_gather (torch >= 2.8); this is "
                             f"torch {torch.__version__}")
        m.set_custom_all_gather(ag)
        m.set_custom_reduce_scatter(rs)
    return ag, rs


def fully_shard_fn():
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):  # 2.6+, 2.4-2.5
        try:
            mod = __import__(where, fromlist=["fully_shard", "MixedPrecisionPolicy"])
            return mod.fully_shard, mod.MixedPrecisionPolicy
        except (ImportError, AttributeError, ValueError):
            pass
    raise SystemExit(f"--mode fsdp2 needs torch >= 2.4 (FSDP2's fully_shard); this is torch {torch.__version__}: "
                     "use --mode ddp")


class Reference:
    """The step that the distributed one must equal, in one process, no collective."""

    def __init__(self, a, device, n):
        self.a, self.n, self.device = a, n, device
        self.master = make_model(a, device)  # float32, what the optimizer updates
        self.compute = make_model(a, device).to(torch.bfloat16) if a.mode == "fsdp2" else self.master
        self.opt = optimizer(self.master.parameters(), a)

    def step(self, step):
        a, n = self.a, self.n
        if self.compute is not self.master:  # FSDP2: the bf16 parameters all-gathered from fp32 shards
            with torch.no_grad():
                for c, m in zip(self.compute.parameters(), self.master.parameters()):
                    c.copy_(m)
        acc, losses = None, []
        for r in range(n):
            self.compute.zero_grad(set_to_none=True)
            loss = loss_of(self.compute, batch(a, step, r, self.device))
            loss.backward()
            losses.append(loss.detach())
            if a.mode == "fsdp2":  # reduce-scatter AVG in float32: sum in rank order, then / n
                grads = [p.grad.float() for p in self.compute.parameters()]
            else:  # DDP: each gradient times 1/n into the bucket, then all-reduce SUM in rank order
                grads = [p.grad.mul(1.0 / n) for p in self.compute.parameters()]
            acc = grads if acc is None else [x + g for x, g in zip(acc, grads)]
        for p, g in zip(self.master.parameters(), acc):
            p.grad = g.div(n) if a.mode == "fsdp2" else g
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("fsdp2", "ddp"), default="fsdp2")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-tensor-update", action="store_true", help="AdamW(foreach=False)")
    ap.add_argument("--backend", default="conccl",
                    help="torch.distributed backend (conccl; another registered one to compare with)")
    ap.add_argument("--fsdp-comms", choices=("group", "conccl"), default="group",
                    help="FSDP2's all-gather and reduce-scatter: on the group's backend (group), or on the DMA "
                         "engines while the group stays on --backend (conccl: set_custom_all_gather/_reduce_scatter)")
    ap.add_argument("--timeout", type=float, default=120, help="collective timeout, seconds")
    ap.add_argument("--check", action="store_true", help="compare with the exact reference, bit for bit")
    ap.add_argument("--json", help="rank 0 writes the run's record here")
    ap.add_argument("--nprocs", type=int, help="start this many ranks here (no torchrun)")
    ap.add_argument("--profile-gemm", type=int, default=0, metavar="STEPS",
                    help="after training (and the check), profile STEPS more steps and as many forward+backward "
                         "passes alone: the GEMM kernels' device time per step in both (CUDA)")
    ap.add_argument("--compute-baseline", type=int, default=0, metavar="ITERS",
                    help="after training, time ITERS forward+backward passes of the unsharded model with no "
                         "collective, every rank at once: the step's compute alone")
    a = ap.parse_args()
    if a.mode == "ddp" and a.fsdp_comms == "conccl":
        raise SystemExit("--fsdp-comms conccl is for --mode fsdp2")
    if a.nprocs and "RANK" not in os.environ:
        return launch(a.nprocs)

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if a.device == "cuda":
        torch.cuda.set_device(local % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        os.environ.setdefault("CONCCL_BACKEND", "nv")
    else:
        device = torch.device("cpu")
        os.environ.setdefault("CONCCL_BACKEND", "emu")
    if a.mode == "fsdp2":
        fully_shard, MixedPrecisionPolicy = fully_shard_fn()
    dist.init_process_group(a.backend, timeout=timedelta(seconds=a.timeout))

    model = make_model(a, device)
    comms = None
    if a.mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(device.type, (n,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        train = model
        if a.fsdp_comms == "conccl":
            comms = custom_comms(model, mesh.get_group())
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        train = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = optimizer(model.parameters(), a)
    ref = Reference(a, device, n) if a.check else None

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    losses, times, worst_loss = [], [], 0.0
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        loss = loss_of(train, batch(a, step, rank, device))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
        if ref is not None:
            want = ref.step(step)[rank]
            if not torch.equal(loss.detach(), want):
                worst_loss = max(worst_loss, abs(float(loss) - float(want)))
                print(f"rank {rank} step {step}: loss {float(loss)!r}, reference {float(want)!r}", flush=True)
        if rank == 0 and (step % 10 == 0 or step == a.steps - 1):
            print(f"step {step:3d}  loss {losses[-1]:.5f}  {times[-1] * 1e3:.2f} ms", flush=True)

    worst_param = 0.0
    if ref is not None:
        for (name, p), q in zip(model.named_parameters(), ref.master.parameters()):
            mine, want = p.detach(), q.detach()
            if hasattr(p, "to_local"):  # FSDP2: a DTensor sharded on dim 0 as torch.chunk shards it
                mine = mine.to_local()
                parts = want.chunk(n, dim=0)
                want = parts[rank] if rank < len(parts) else want[:0]
            if mine.shape != want.shape or not torch.equal(mine, want):
                d = float((mine.float() - want.float()).abs().max()) if mine.shape == want.shape else float("inf")
                worst_param = max(worst_param, d)
                print(f"rank {rank}: parameter {name} differs from the reference by up to {d:.3g}", flush=True)
    compute_ms = compute_alone(a, device, rank) if a.compute_baseline else None
    gemm = None
    if a.profile_gemm and device.type == "cuda":
        def train_step(k):
            loss_of(train, batch(a, a.steps + k, rank, device)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        alone = make_model(a, device)
        alone = alone.to(torch.bfloat16) if a.mode == "fsdp2" else alone
        tokens = batch(a, 0, rank, device)

        def alone_step(k):
            loss_of(alone, tokens).backward()
            alone.zero_grad(set_to_none=True)
        in_step = gemm_ms_per_step(train_step, a.profile_gemm)
        dist.barrier()
        by_itself = gemm_ms_per_step(alone_step, a.profile_gemm)
        dist.barrier()
        gemm = {"in_step_ms": in_step, "alone_ms": by_itself, "slowdown": in_step / by_itself if by_itself else None}
    exact = worst_loss == 0.0 and worst_param == 0.0
    step_ms = statistics.median(times[min(5, len(times) - 1):]) * 1e3  # after warm-up
    calls = {"all_gather": comms[0].calls, "reduce_scatter": comms[1].calls,
             "pool_tensors": comms[0].pool_tensors + comms[1].pool_tensors,
             "other_tensors": comms[0].other_tensors + comms[1].other_tensors} if comms else None
    record = {"mode": a.mode, "world_size": n, "torch_backend": a.backend, "fsdp_comms": a.fsdp_comms, "conccl_calls": calls, "device": str(device), "backend": os.environ["CONCCL_BACKEND"],
              "torch": torch.__version__, "steps": a.steps, "losses": losses,
              "step_ms_median": step_ms, "step_ms": [t * 1e3 for t in times],
              "compute_ms_median": compute_ms, "gemm": gemm,
              "step_over_compute": step_ms / compute_ms if compute_ms else None, "checked": a.check, "exact": exact if a.check else None,
              "max_loss_diff": worst_loss, "max_param_diff": worst_param}
    # gloo takes CPU tensors (its CUDA paths are not what is tested here)
    flags = torch.tensor([0 if exact or not a.check else 1], dtype=torch.int32,
                         device="cpu" if a.backend == "gloo" else device)
    dist.all_reduce(flags)  # every rank's check
    if rank == 0:
        print(f"{a.mode}, {n} ranks, {a.backend}" + (f" (FSDP comms on conccl: {calls['all_gather']} all-gathers, "
                                                      f"{calls['reduce_scatter']} reduce-scatters, buffers "
                                                      f"{calls['pool_tensors']} pooled / {calls['other_tensors']} "
                                                      "staged)" if calls else "")
              + f", {a.steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
              f"step {record['step_ms_median']:.2f} ms (median after warm-up)"
              + (f"; compute alone {compute_ms:.2f} ms (step / compute {record['step_over_compute']:.2f})"
                 if compute_ms else "")
              + (f"; GEMM kernels {gemm['in_step_ms']:.2f} ms per step, {gemm['alone_ms']:.2f} alone "
                 f"(slowdown {gemm['slowdown']:.3f})" if gemm and gemm["slowdown"] else "")
              + (f"; reference: {'equal bit for bit' if int(flags) == 0 else f'{int(flags)} rank(s) differ'}"
                 if a.check else ""), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(record, f, indent=1)
    dist.destroy_process_group()
    return 1 if a.check and int(flags) else 0


def compute_alone(a, device, rank):
    """The step's forward and backward without any collective: the unsharded model in
    the step's compute dtype, on this rank's batch, all ranks at once (so the GPU is
    shared as in the step). The step's time over this one is what the collectives
    cost the step (the GEMM slowdown and what did not overlap)."""
    model = make_model(a, device)
    if a.mode == "fsdp2":
        model = model.to(torch.bfloat16)
    tokens = batch(a, 0, rank, device)
    dist.barrier()
    times = []
    for _ in range(a.compute_baseline):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_of(model, tokens).backward()
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dist.barrier()
    return statistics.median(times[min(3, len(times) - 1):]) * 1e3


def gemm_ms_per_step(step, k):
    """Device time of the GEMM kernels (cuBLAS/CUTLASS: names with gemm, nvjet, xmma or
    cutlass) per call of step(i), over k calls under torch.profiler. Beside collectives
    on the SMs they share the SMs, caches and memory with the copy and add kernels; on
    the DMA engines only the memory."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(k):
            step(i)
        torch.cuda.synchronize()
    total_us = 0.0
    for e in prof.key_averages():
        name = e.key.lower()
        if any(w in name for w in ("gemm", "nvjet", "xmma", "cutlass")):
            total_us += getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
    return total_us / 1e3 / k


def launch(n):
    """What torchrun does for one node, enough for this script: n ranks with env://."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        print(f"exit codes of ranks 0..{n - 1}: {codes}", file=sys.stderr)
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
