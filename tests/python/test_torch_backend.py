"""tests/python/test_torch_backend.py - the "conccl" torch.distributed backend, as a user sees it.

Run by ctest (tests/python/CMakeLists.txt, Python.TorchBackend) with
PYTHONPATH=python and CONCCL_LIBRARY=<build>/src/libconccl.so. Only
torch.distributed's public API is used: `import conccl.torch` registers the
backend, then every worker process calls
    torch.distributed.init_process_group("conccl", init_method="file://...",
                                         rank=r, world_size=n, timeout=...)
with CPU tensors (ConCCL's emulated node, no GPU).

What runs (2, 3 and 4 ranks): all_reduce, reduce (dst n-1), reduce_scatter_tensor and
reduce_scatter (lists) for float32, bfloat16, float16, int32, int64, uint8 x SUM,
PRODUCT, MIN, MAX, AVG; all_reduce, reduce_scatter_tensor and reduce of float64, int8,
int16 and bool (types the reduce step does not take: moves, then torch); all_gather_into_tensor, all_gather (lists; equal and uneven sizes), broadcast (src 1),
gather (dst n-1), scatter (src 1), all_to_all_single (equal splits, uneven splits,
uneven splits with empty pieces), all_to_all (lists, equal and uneven), barrier,
send/recv 0 -> 1; odd-sized 1-D and 2-D shapes; the same with 1 KiB of staging
(CONCCL_TORCH_STAGING_BYTES), so that every op goes through it in pieces; async_op=True (Work.wait,
get_future); new_group([0, 1]) on 4 ranks with the default group used afterwards;
tensors of the group's pool (conccl.torch.group_pool: no staging, counted by the
group's stats()) and a rank that stages while another does not (an error on every
rank); ranks that all-reduce different sizes (an error on every rank, saying so); a rank
that exits (os._exit) right after init, and one that exits after warm-up
calls: the survivors' next collective must raise, in bounded time, naming it.

The parent spawns N workers ('spawn' start method), enforces a deadline on them
(kills them and fails past it), and each worker writes a JSON result file
(failures, skips) that the parent asserts on, messages shown. Workers never stop
at a wrong element: they record it and go on to the next call, so that every
rank keeps issuing the same collectives.

Data: random, from a seed made of the call's name and the rank, so that every
rank regenerates every other rank's input and checks every element of its output
against a reference computed in the worker. Reductions follow the library's
arithmetic (docs/reductions.md): rank order 0..n-1, float32 steps for float32,
float32 accumulation and one rounding at the end for bfloat16/float16, integers
wrap, integer AVG truncates toward zero; compared bit for bit.

Self-check of the test logic on gloo:
    CONCCL_TORCH_TEST_BACKEND=gloo python3 -m unittest -v test_torch_backend
gloo reduces in its own order and precision, so its float SUM/PRODUCT/AVG are
compared with a tolerance (the conccl run stays exact), and the calls gloo does
not implement are reported as skipped (never on conccl).
"""
import json
import os
import re
import sys
import tempfile
import time
import traceback
import unittest
import weakref
import zlib
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
except ImportError:  # pragma: no cover - the test is skipped, saying why
    torch = None
    dist = None

BACKEND = os.environ.get("CONCCL_TORCH_TEST_BACKEND", "conccl")
DEADLINE_S = float(os.environ.get("CONCCL_TORCH_TEST_DEADLINE", "120"))
COLL_TIMEOUT_S = 30   # init_process_group(timeout=) of the ordinary scenarios
KILL_TIMEOUT_S = 20   # ... and of the killed-rank one
KILL_BOUND_S = 60     # a survivor's collective must raise within this

REDOPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")
REDUCE_DTYPES = ("float32", "bfloat16", "float16", "int32", "int64", "uint8")
MOVE_DTYPES = ("float32", "int64", "uint8")
FLOATS = ("float32", "bfloat16", "float16")
BITS = {"float32": "int32", "bfloat16": "int16", "float16": "int16"}
EPS = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}


def _dt(name):
    return getattr(torch, name)


# --------------------------------------------------------------------------- data

def seed_of(*parts):
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def gen(shape, dtype, redop, *tag):
    """The input of one rank for one call: tag ends with the rank. Never all zeros."""
    g = torch.Generator().manual_seed(seed_of(*tag))
    shape = tuple(shape)
    if dtype in FLOATS:
        if redop == "PRODUCT":  # magnitudes in [0.5, 2): products of 4 stay in range for fp16
            mag = 0.5 + 1.5 * torch.rand(shape, generator=g)
            sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
            x = mag * sign
        else:
            x = (torch.rand(shape, generator=g) * 16 - 8) + 1e-3  # no exact zero
        t = x.to(_dt(dtype))
    elif dtype == "int32":
        lo, hi = (-1000, 1001) if redop == "PRODUCT" else (-2 ** 31, 2 ** 31)  # SUM/AVG wrap
        t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(torch.int32)
    elif dtype == "int64":
        lo, hi = (-1000, 1001) if redop == "PRODUCT" else (-2 ** 60, 2 ** 60)
        if redop in ("MIN", "MAX"):
            lo, hi = -2 ** 62, 2 ** 62
        t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    elif dtype == "uint8":
        t = torch.randint(0, 256, shape, generator=g, dtype=torch.int64).to(torch.uint8)
    else:
        raise ValueError(dtype)
    if t.numel() and not bool((t != 0).any()):
        t.view(-1)[0] = 1
    return t


def _wrap(x64, dtype):
    """int64 tensor -> dtype with two's complement wrap (x64 holds the exact value mod 2^64)."""
    if dtype == "int64":
        return x64.clone()
    if dtype == "int32":
        return (((x64 + 2 ** 31) % 2 ** 32) - 2 ** 31).to(torch.int32)
    if dtype == "uint8":
        return (x64 % 256).to(torch.uint8)
    raise ValueError(dtype)


def ref_reduce(inputs, redop, dtype):
    """The library's arithmetic, inputs in rank order."""
    n = len(inputs)
    if dtype in FLOATS:
        acc = inputs[0].float().clone()
        for x in inputs[1:]:
            x = x.float()
            if redop in ("SUM", "AVG"):
                acc = acc + x
            elif redop == "PRODUCT":
                acc = acc * x
            elif redop == "MIN":
                acc = torch.minimum(acc, x)
            elif redop == "MAX":
                acc = torch.maximum(acc, x)
        if redop == "AVG":
            acc = acc / n
        return acc.to(_dt(dtype))
    acc = inputs[0].to(torch.int64)
    for x in inputs[1:]:
        x = x.to(torch.int64)
        if redop in ("SUM", "AVG"):
            acc = acc + x      # exact: the data keeps int64 sums in range
        elif redop == "PRODUCT":
            acc = acc * x      # exact: |x| <= 1000 (uint8: < 256^4)
        elif redop == "MIN":
            acc = torch.minimum(acc, x)
        elif redop == "MAX":
            acc = torch.maximum(acc, x)
    if redop == "AVG":
        w = _wrap(acc, dtype).to(torch.int64)
        return _wrap(torch.div(w, n, rounding_mode="trunc"), dtype)
    return _wrap(acc, dtype)


def gloo_tolerance(inputs, redop, dtype):
    """An elementwise bound for gloo's own order/precision (self-check only)."""
    n = len(inputs)
    eps = EPS[dtype]
    if redop in ("SUM", "AVG"):
        mag = sum(x.float().abs() for x in inputs)
        if redop == "AVG":
            mag = mag / n
        return 2 * (n + 1) * eps * mag
    if redop == "PRODUCT":
        mag = inputs[0].float().abs()
        for x in inputs[1:]:
            mag = mag * x.float().abs()
        return 2 * (n + 1) * eps * mag
    return None  # MIN/MAX: exact


# --------------------------------------------------------------------------- the worker side

class Checker:
    def __init__(self, rank, world, backend, tmpdir):
        self.rank, self.world, self.backend, self.tmpdir = rank, world, backend, tmpdir
        self.failures, self.skipped, self.checks, self.calls = [], [], 0, 0
        self._progress = os.path.join(tmpdir, "progress.%d" % rank)

    def progress(self, what):
        with open(self._progress, "w") as f:
            f.write(what)

    def fail(self, name, msg):
        self.failures.append("rank %d: %s: %s" % (self.rank, name, msg))

    def call(self, name, fn):
        """Run one collective (and its checks); record an exception and go on."""
        self.progress(name)
        self.calls += 1
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported, the parent fails the test
            msg = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            if self.backend == "gloo" and re.search(
                    r"not supported|unsupported|not implemented|only supports|does not support|no support|cannot use|"
                    r"invalid scalar type|NotImplemented", str(e) + " " + type(e).__name__, re.I):
                self.skipped.append("%s (%s)" % (name, msg))
            else:
                self.fail(name, "raised " + msg + "\n" + traceback.format_exc(limit=4))

    def same(self, name, got, exp, tol=None):
        """Every element; exact (bitwise for floats) unless tol (gloo self-check) is given."""
        self.checks += 1
        if got.dtype != exp.dtype or tuple(got.shape) != tuple(exp.shape):
            self.fail(name, "dtype/shape %s %s, expected %s %s" % (got.dtype, tuple(got.shape),
                                                                   exp.dtype, tuple(exp.shape)))
            return False
        g, e = got.contiguous().reshape(-1), exp.contiguous().reshape(-1)
        dname = str(exp.dtype).replace("torch.", "")
        if tol is not None:
            bad = (g.float() - e.float()).abs() > tol.reshape(-1) + 1e-30
        elif dname in BITS:
            bad = g.view(_dt(BITS[dname])) != e.view(_dt(BITS[dname]))
        else:
            bad = g != e
        if bool(bad.any()):
            idx = bad.nonzero().reshape(-1)
            show = ", ".join("[%d] got %r expected %r" % (i, g[i].item(), e[i].item()) for i in idx[:4].tolist())
            self.fail(name, "%d of %d elements differ: %s" % (idx.numel(), e.numel(), show))
            return False
        return True

    def tol(self, inputs, redop, dtype):
        if self.backend == "gloo" and dtype in FLOATS:
            return gloo_tolerance(inputs, redop, dtype)
        return None


def _redop(name):
    return getattr(dist.ReduceOp, name)


class GlooAdapter:
    """The gloo self-check only: torch 1.13's gloo lacks some calls (reduce_scatter,
    _allgather_base, alltoall of lists, AVG, bfloat16); they are composed here of calls
    it has, so that the test's own logic (inputs, references, checks) runs on every
    case. The conccl run never goes through this: it calls torch.distributed directly."""

    def __getattr__(self, name):
        return getattr(dist, name)

    @staticmethod
    def _n(group):
        return dist.get_world_size(group)

    def all_reduce(self, t, op=None, group=None, async_op=False):
        op = dist.ReduceOp.SUM if op is None else op
        if t.dtype != torch.bfloat16 and op != dist.ReduceOp.AVG:
            return dist.all_reduce(t, op=op, group=group, async_op=async_op)
        assert not async_op
        w = t.float() if t.dtype == torch.bfloat16 else t.clone()
        dist.all_reduce(w, op=dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op, group=group)
        if op == dist.ReduceOp.AVG:
            n = self._n(group)
            w = w / n if w.is_floating_point() else torch.div(w, n, rounding_mode="trunc")
        t.copy_(w)

    def reduce(self, t, dst, op=None, group=None, async_op=False):
        assert not async_op
        w = t.clone()
        self.all_reduce(w, op=op, group=group)
        if dist.get_rank() == dst:
            t.copy_(w)

    def broadcast(self, t, src, group=None, async_op=False):
        v = t.view(torch.float16) if t.dtype == torch.bfloat16 else t
        return dist.broadcast(v, src=src, group=group, async_op=async_op)

    def all_gather_into_tensor(self, out, inp, group=None, async_op=False):
        assert not async_op
        n = self._n(group)
        parts = [torch.empty_like(inp) for _ in range(n)]
        self.all_gather(parts, inp, group=group)
        out.copy_(torch.cat(parts, 0))

    def all_gather(self, outs, inp, group=None, async_op=False):
        assert not async_op
        if inp.dtype == torch.bfloat16:
            views = [o.view(torch.float16) for o in outs]
            dist.all_gather(views, inp.view(torch.float16), group=group)
        else:
            dist.all_gather(outs, inp, group=group)

    def reduce_scatter_tensor(self, out, inp, op=None, group=None, async_op=False):
        assert not async_op
        w = inp.clone()
        self.all_reduce(w, op=op, group=group)
        k, r = out.shape[0], dist.get_rank(group)
        out.copy_(w[r * k:(r + 1) * k])

    def reduce_scatter(self, out, inps, op=None, group=None, async_op=False):
        self.reduce_scatter_tensor(out, torch.cat(inps, 0), op=op, group=group, async_op=async_op)

    def all_to_all(self, outs, inps, group=None, async_op=False):
        assert not async_op
        out = torch.empty((sum(o.shape[0] for o in outs),) + tuple(outs[0].shape[1:]), dtype=outs[0].dtype)
        dist.all_to_all_single(out, torch.cat(inps, 0), output_split_sizes=[o.shape[0] for o in outs],
                               input_split_sizes=[i.shape[0] for i in inps], group=group)
        at = 0
        for o in outs:
            o.copy_(out[at:at + o.shape[0]])
            at += o.shape[0]


OPS = None  # torch.distributed itself, or the GlooAdapter for the self-check


def gen_other(shape, dtype, redop, *tag):
    """Inputs of the types ConCCL's reduce step does not take (the backend reduces them
    by moves and torch): float64, int8, int16, bool."""
    g = torch.Generator().manual_seed(seed_of(*tag))
    if dtype == "float64":
        if redop == "PRODUCT":
            return (0.5 + 1.5 * torch.rand(shape, generator=g, dtype=torch.float64)) * (
                torch.randint(0, 2, shape, generator=g) * 2 - 1)
        return torch.rand(shape, generator=g, dtype=torch.float64) * 16 - 8 + 1e-9
    if dtype == "bool":
        return torch.randint(0, 2, shape, generator=g).bool()
    bits = 8 if dtype == "int8" else 16
    return torch.randint(-2 ** (bits - 1), 2 ** (bits - 1), shape, generator=g, dtype=torch.int64).to(_dt(dtype))


def ref_other(inputs, redop, dtype):
    """Rank order; float64 arithmetic; int8/int16 wrap and AVG truncates; bool SUM/MAX or, PRODUCT/MIN and."""
    n = len(inputs)
    if dtype == "bool":
        acc = inputs[0].clone()
        for x in inputs[1:]:
            acc = (acc | x) if redop in ("SUM", "MAX") else (acc & x)
        return acc
    if dtype == "float64":
        acc = inputs[0].clone()
        for x in inputs[1:]:
            acc = {"SUM": acc + x, "AVG": acc + x, "PRODUCT": acc * x, "MIN": torch.minimum(acc, x),
                   "MAX": torch.maximum(acc, x)}[redop]
        return acc / n if redop == "AVG" else acc
    bits = 8 if dtype == "int8" else 16
    acc = inputs[0].to(torch.int64)
    for x in inputs[1:]:
        x = x.to(torch.int64)
        acc = {"SUM": acc + x, "AVG": acc + x, "PRODUCT": acc * x, "MIN": torch.minimum(acc, x),
               "MAX": torch.maximum(acc, x)}[redop]
    acc = ((acc + 2 ** (bits - 1)) % 2 ** bits) - 2 ** (bits - 1)  # two's complement wrap
    if redop == "AVG":
        acc = torch.div(acc, n, rounding_mode="trunc")
    return acc.to(_dt(dtype))


def run_other_dtypes(c):
    """all_reduce, reduce_scatter_tensor and reduce of float64, int8, int16 and bool: every op
    but AVG of bool (which must raise, naming the fix)."""
    r, n = c.rank, c.world
    for dtype in ("float64", "int8", "int16", "bool"):
        for op in REDOPS:
            if dtype == "bool" and op == "AVG":
                name = "all_reduce bool AVG"

                def f(name=name):
                    try:
                        OPS.all_reduce(torch.ones(3, dtype=torch.bool), op=_redop("AVG"))
                    except RuntimeError as e:
                        if "AVG" not in str(e):
                            c.fail(name, "the error does not name AVG: %s" % e)
                        return
                    c.fail(name, "returned; expected an error")
                if BACKEND == "conccl":  # gloo has its own view of bool AVG
                    c.call(name, f)
                continue
            tag = ("other all_reduce", n, dtype, op)
            name = "all_reduce %s %s" % (dtype, op)

            def f(tag=tag, name=name, dtype=dtype, op=op):
                ins = [gen_other((1001,), dtype, op, *tag, j) for j in range(n)]
                t = ins[r].clone()
                OPS.all_reduce(t, op=_redop(op))
                c.same(name, t, ref_other(ins, op, dtype))
            c.call(name, f)
            tag = ("other reduce_scatter", n, dtype, op)
            name = "reduce_scatter_tensor %s %s" % (dtype, op)

            def f(tag=tag, name=name, dtype=dtype, op=op):
                ins = [gen_other((n * 333,), dtype, op, *tag, j) for j in range(n)]
                out = torch.empty(333, dtype=_dt(dtype))
                OPS.reduce_scatter_tensor(out, ins[r].clone(), op=_redop(op))
                c.same(name, out, ref_other(ins, op, dtype)[r * 333:(r + 1) * 333])
            c.call(name, f)
            tag = ("other reduce", n, dtype, op)
            name = "reduce dst=%d %s %s" % (n - 1, dtype, op)

            def f(tag=tag, name=name, dtype=dtype, op=op):
                ins = [gen_other((517,), dtype, op, *tag, j) for j in range(n)]
                t = ins[r].clone()
                OPS.reduce(t, dst=n - 1, op=_redop(op))
                c.same(name, t, ref_other(ins, op, dtype) if r == n - 1 else ins[r])
            c.call(name, f)


def run_collectives(c):
    run_other_dtypes(c)
    r, n = c.rank, c.world
    last = n - 1          # dst of reduce/gather: not 0
    src = 1               # src of broadcast/scatter: not 0
    shapes_1d_2d = ((1001,), (12, 77))

    # ---- reductions: every dtype x op
    for dtype in REDUCE_DTYPES:
        for op in REDOPS:
            for shape in shapes_1d_2d:
                tag = ("all_reduce", n, dtype, op, shape)
                name = "all_reduce %s %s %s" % (dtype, op, shape)

                def f(tag=tag, name=name, dtype=dtype, op=op, shape=shape):
                    ins = [gen(shape, dtype, op, *tag, j) for j in range(n)]
                    t = ins[r].clone()
                    OPS.all_reduce(t, op=_redop(op))
                    c.same(name, t, ref_reduce(ins, op, dtype), c.tol(ins, op, dtype))
                c.call(name, f)

            for shape in ((333,), (3, 77)):
                tag = ("reduce_scatter_tensor", n, dtype, op, shape)
                name = "reduce_scatter_tensor %s %s out%s" % (dtype, op, shape)

                def f(tag=tag, name=name, dtype=dtype, op=op, shape=shape):
                    big = (n * shape[0],) + shape[1:]
                    ins = [gen(big, dtype, op, *tag, j) for j in range(n)]
                    inp = ins[r].clone()
                    out = torch.empty(shape, dtype=_dt(dtype))
                    OPS.reduce_scatter_tensor(out, inp, op=_redop(op))
                    full = ref_reduce(ins, op, dtype)
                    tol = c.tol(ins, op, dtype)
                    sl = slice(r * shape[0], (r + 1) * shape[0])
                    c.same(name, out, full[sl], None if tol is None else tol[sl])
                    c.same(name + " (input untouched)", inp, ins[r])
                c.call(name, f)

            shape = (1001,)
            tag = ("reduce", n, dtype, op, shape)
            name = "reduce dst=%d %s %s %s" % (last, dtype, op, shape)

            def f(tag=tag, name=name, dtype=dtype, op=op, shape=shape):
                ins = [gen(shape, dtype, op, *tag, j) for j in range(n)]
                t = ins[r].clone()
                OPS.reduce(t, dst=last, op=_redop(op))
                if r == last:
                    c.same(name, t, ref_reduce(ins, op, dtype), c.tol(ins, op, dtype))
            c.call(name, f)

    # reduce_scatter, list form: a few dtype x op
    for dtype, op in (("float32", "SUM"), ("int32", "MAX"), ("bfloat16", "AVG"), ("uint8", "PRODUCT"),
                      ("float16", "MIN"), ("int64", "SUM")):
        for shape in ((257,), (5, 31)):
            tag = ("reduce_scatter", n, dtype, op, shape)
            name = "reduce_scatter(list) %s %s %s" % (dtype, op, shape)

            def f(tag=tag, name=name, dtype=dtype, op=op, shape=shape):
                lists = [[gen(shape, dtype, op, *tag, j, k) for k in range(n)] for j in range(n)]
                out = torch.empty(shape, dtype=_dt(dtype))
                mine = [x.clone() for x in lists[r]]
                OPS.reduce_scatter(out, mine, op=_redop(op))
                ins = [lists[j][r] for j in range(n)]
                c.same(name, out, ref_reduce(ins, op, dtype), c.tol(ins, op, dtype))
            c.call(name, f)

    # ---- data movement
    for dtype in MOVE_DTYPES + ("bfloat16",):
        for shape in shapes_1d_2d:
            tag = ("all_gather_into_tensor", n, dtype, shape)
            name = "all_gather_into_tensor %s %s" % (dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                ins = [gen(shape, dtype, "SUM", *tag, j) for j in range(n)]
                inp = ins[r].clone()
                out = torch.empty((n * shape[0],) + shape[1:], dtype=_dt(dtype))
                OPS.all_gather_into_tensor(out, inp)
                c.same(name, out, torch.cat(ins, 0))
                c.same(name + " (input untouched)", inp, ins[r])
            c.call(name, f)

            tag = ("broadcast", n, dtype, shape)
            name = "broadcast src=%d %s %s" % (src, dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                mine = gen(shape, dtype, "SUM", *tag, r)
                OPS.broadcast(mine, src=src)
                c.same(name, mine, gen(shape, dtype, "SUM", *tag, src))
            c.call(name, f)

    for dtype in MOVE_DTYPES:
        for shape in shapes_1d_2d:
            tag = ("all_gather", n, dtype, shape)
            name = "all_gather(list) %s %s" % (dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                ins = [gen(shape, dtype, "SUM", *tag, j) for j in range(n)]
                outs = [torch.empty(shape, dtype=_dt(dtype)) for _ in range(n)]
                OPS.all_gather(outs, ins[r].clone())
                for j in range(n):
                    c.same("%s [from %d]" % (name, j), outs[j], ins[j])
            c.call(name, f)

            # Ranks of different sizes, as ProcessGroupNCCL takes them: rank j gives j + 1 rows.
            tag = ("all_gather uneven", n, dtype, shape)
            name = "all_gather(list, uneven) %s %s" % (dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                rows = lambda j: (shape[0] * (j + 1),) + tuple(shape[1:])  # noqa: E731
                ins = [gen(rows(j), dtype, "SUM", *tag, j) for j in range(n)]
                outs = [gen(rows(j), dtype, "SUM", *tag, "before", j) for j in range(n)]  # random: unwritten shows
                OPS.all_gather(outs, ins[r].clone())
                for j in range(n):
                    c.same("%s [from %d]" % (name, j), outs[j], ins[j])
            if c.backend == "conccl":  # gloo takes equal sizes only
                c.call(name, f)

            tag = ("gather", n, dtype, shape)
            name = "gather dst=%d %s %s" % (last, dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                ins = [gen(shape, dtype, "SUM", *tag, j) for j in range(n)]
                outs = [torch.empty(shape, dtype=_dt(dtype)) for _ in range(n)] if r == last else None
                OPS.gather(ins[r].clone(), gather_list=outs, dst=last)
                if r == last:
                    for j in range(n):
                        c.same("%s [from %d]" % (name, j), outs[j], ins[j])
            c.call(name, f)

            tag = ("scatter", n, dtype, shape)
            name = "scatter src=%d %s %s" % (src, dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                pieces = [gen(shape, dtype, "SUM", *tag, k) for k in range(n)]  # src's list
                out = torch.empty(shape, dtype=_dt(dtype))
                OPS.scatter(out, scatter_list=[p.clone() for p in pieces] if r == src else None, src=src)
                c.same(name, out, pieces[r])
            c.call(name, f)

            # all_to_all_single, equal splits
            tag = ("all_to_all_single", n, dtype, shape)
            name = "all_to_all_single(equal) %s %s" % (dtype, shape)

            def f(tag=tag, name=name, dtype=dtype, shape=shape):
                big = (n * shape[0],) + shape[1:]
                ins = [gen(big, dtype, "SUM", *tag, j) for j in range(n)]
                inp = ins[r].clone()
                out = torch.empty(big, dtype=_dt(dtype))
                OPS.all_to_all_single(out, inp)
                k = shape[0]
                exp = torch.cat([ins[j][r * k:(r + 1) * k] for j in range(n)], 0)
                c.same(name, out, exp)
                c.same(name + " (input untouched)", inp, ins[r])
            c.call(name, f)

    # all_to_all_single and all_to_all with uneven splits: s(i, j) rows rank i sends to rank j
    def splits_pos(i, j):
        return 1 + (3 * i + 5 * j + i * j) % 7

    def splits_zero(i, j):  # some pairs send nothing (also i == j for some)
        return 0 if (i + 2 * j) % 3 == 1 else 2 + (i + j) % 5

    for dtype in ("float32", "int64"):
        for sname, s, row in (("uneven", splits_pos, ()), ("uneven+zeros", splits_zero, (29,))):
            for form in ("all_to_all_single", "all_to_all(list)"):
                tag = (form, n, dtype, sname, row)
                name = "%s(%s) %s rows%s" % (form, sname, dtype, row)

                def f(tag=tag, name=name, dtype=dtype, s=s, row=row, form=form):
                    def inp_of(i):  # rank i's input: pieces for ranks 0..n-1, in order
                        return [gen((13 * s(i, j),) + row, dtype, "SUM", *tag, i, j) for j in range(n)]
                    mine = inp_of(r)
                    exp = [inp_of(j)[r] for j in range(n)]
                    if form == "all_to_all_single":
                        inp = torch.cat(mine, 0)
                        keep = inp.clone()
                        out = torch.empty((sum(e.shape[0] for e in exp),) + row, dtype=_dt(dtype))
                        OPS.all_to_all_single(out, inp,
                                               output_split_sizes=[13 * s(j, r) for j in range(n)],
                                               input_split_sizes=[13 * s(r, j) for j in range(n)])
                        c.same(name, out, torch.cat(exp, 0))
                        c.same(name + " (input untouched)", inp, keep)
                    else:
                        outs = [torch.empty_like(e) for e in exp]
                        OPS.all_to_all(outs, [m.clone() for m in mine])
                        for j in range(n):
                            c.same("%s [from %d]" % (name, j), outs[j], exp[j])
                c.call(name, f)

    for dtype in ("float32", "int64"):
        shape = (31, 7)
        tag = ("all_to_all(list) equal", n, dtype, shape)
        name = "all_to_all(list)(equal) %s %s" % (dtype, shape)

        def f(tag=tag, name=name, dtype=dtype, shape=shape):
            mine = [gen(shape, dtype, "SUM", *tag, r, j) for j in range(n)]
            outs = [torch.empty(shape, dtype=_dt(dtype)) for _ in range(n)]
            OPS.all_to_all(outs, [m.clone() for m in mine])
            for j in range(n):
                c.same("%s [from %d]" % (name, j), outs[j], gen(shape, dtype, "SUM", *tag, j, r))
        c.call(name, f)

    # ---- barrier: nobody leaves before everybody arrived
    def f():
        time.sleep(0.15 * (n - 1 - r))
        open(os.path.join(c.tmpdir, "arrived.%d" % r), "w").close()
        OPS.barrier()
        missing = [j for j in range(n) if not os.path.exists(os.path.join(c.tmpdir, "arrived.%d" % j))]
        c.checks += 1
        if missing:
            c.fail("barrier", "left the barrier before ranks %s arrived" % missing)
    c.call("barrier", f)

    # ---- send/recv: rank 0 -> rank 1, the others idle
    for dtype, shape in (("float32", (1001,)), ("int32", (9, 41)), ("uint8", (777,))):
        tag = ("send/recv", n, dtype, shape)
        name = "send/recv 0->1 %s %s" % (dtype, shape)

        def f(tag=tag, name=name, dtype=dtype, shape=shape):
            x = gen(shape, dtype, "SUM", *tag)
            if r == 0:
                OPS.send(x.clone(), dst=1)
            elif r == 1:
                got = torch.zeros(shape, dtype=_dt(dtype))
                OPS.recv(got, src=0)
                c.same(name, got, x)
        c.call(name, f)
    c.call("barrier after send/recv", lambda: OPS.barrier())

    # ---- async_op=True
    def f():
        shape, dtype = (1001,), "float32"
        tag = ("async all_reduce", n)
        ins = [gen(shape, dtype, "SUM", *tag, j) for j in range(n)]
        t = ins[r].clone()
        work = OPS.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
        fut = work.get_future()
        work.wait()
        c.checks += 1
        if not work.is_completed():
            c.fail("async all_reduce", "work.is_completed() is False after work.wait()")
        val = fut.wait()
        exp = ref_reduce(ins, "SUM", dtype)
        c.same("async all_reduce (tensor after wait)", t, exp, c.tol(ins, "SUM", dtype))
        check_future_value(c, "async all_reduce (future value)", val, exp, c.tol(ins, "SUM", dtype))
    c.call("async all_reduce", f)

    def f():  # two outstanding ops, waited on through their futures only, in reverse order
        shape = (12 * n, 77)
        tag_a, tag_b = ("async all_to_all_single", n), ("async broadcast", n)
        ins = [gen(shape, "int64", "SUM", *tag_a, j) for j in range(n)]
        out = torch.empty(shape, dtype=torch.int64)
        b = gen((12, 77), "float32", "SUM", *tag_b, r)
        w1 = OPS.all_to_all_single(out, ins[r].clone(), async_op=True)
        w2 = OPS.broadcast(b, src=src, async_op=True)
        v2 = w2.get_future().wait()
        v1 = w1.get_future().wait()
        exp_b = gen((12, 77), "float32", "SUM", *tag_b, src)
        exp_a = torch.cat([ins[j][r * 12:(r + 1) * 12] for j in range(n)], 0)
        c.same("async broadcast (tensor after future)", b, exp_b)
        check_future_value(c, "async broadcast (future value)", v2, exp_b)
        c.same("async all_to_all_single (tensor after future)", out, exp_a)
        check_future_value(c, "async all_to_all_single (future value)", v1, exp_a)
        w1.wait()
        w2.wait()
    c.call("async all_to_all_single + broadcast", f)

    def f():
        shape = (1001,)
        ins = [gen(shape, "uint8", "SUM", "async all_gather_into_tensor", n, j) for j in range(n)]
        out = torch.empty((n * shape[0],), dtype=torch.uint8)
        w = dist.all_gather_into_tensor(out, ins[r].clone(), async_op=True)  # gloo: skipped (no _allgather_base)
        w.wait()
        c.same("async all_gather_into_tensor (tensor after wait)", out, torch.cat(ins, 0))
        check_future_value(c, "async all_gather_into_tensor (future value)", w.get_future().wait(),
                           torch.cat(ins, 0))
    c.call("async all_gather_into_tensor", f)

    if c.backend == "conccl":  # gloo has no PREMUL_SUM
        run_premul_sum(c)

    # ---- the default group still works at the end
    def f():
        x = torch.full((5,), float(r + 1))
        OPS.all_reduce(x)
        c.same("final all_reduce", x, torch.full((5,), float(n * (n + 1) // 2)))
    c.call("final all_reduce", f)


def check_future_value(c, name, val, exp, tol=None):
    c.checks += 1
    tensors = val if isinstance(val, (list, tuple)) else [val]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    if not tensors:
        c.fail(name, "the future's value holds no tensor: %r" % (type(val),))
        return
    c.same(name, tensors[0], exp, tol)


def run_new_group(c):
    r, n = c.rank, c.world
    g = dist.new_group([0, 1])

    for dtype, op in (("float32", "SUM"), ("int64", "MAX"), ("bfloat16", "SUM")):
        tag = ("subgroup all_reduce", n, dtype, op)
        name = "new_group([0,1]) all_reduce %s %s" % (dtype, op)

        def f(tag=tag, name=name, dtype=dtype, op=op):
            ins = [gen((1001,), dtype, op, *tag, j) for j in range(2)]
            if r in (0, 1):
                t = ins[r].clone()
                OPS.all_reduce(t, op=_redop(op), group=g)
                c.same(name, t, ref_reduce(ins, op, dtype), c.tol(ins, op, dtype))
        c.call(name, f)

    def f():
        x = gen((12, 77), "int32", "SUM", "subgroup broadcast", 1)
        if r in (0, 1):
            t = x.clone() if r == 1 else torch.zeros_like(x)
            OPS.broadcast(t, src=1, group=g)
            c.same("new_group([0,1]) broadcast src=1", t, x)
    c.call("new_group([0,1]) broadcast src=1", f)

    for dtype, op in (("float32", "SUM"), ("int32", "MIN")):
        tag = ("default after subgroup", n, dtype, op)
        name = "default group all_reduce after new_group %s %s" % (dtype, op)

        def f(tag=tag, name=name, dtype=dtype, op=op):
            ins = [gen((999,), dtype, op, *tag, j) for j in range(n)]
            t = ins[r].clone()
            OPS.all_reduce(t, op=_redop(op))
            c.same(name, t, ref_reduce(ins, op, dtype), c.tol(ins, op, dtype))
        c.call(name, f)

    def f():
        shape = (257,)
        ins = [gen(shape, "float32", "SUM", "default ag after subgroup", j) for j in range(n)]
        out = torch.empty((n * 257,))
        OPS.all_gather_into_tensor(out, ins[r].clone())
        c.same("default group all_gather_into_tensor after new_group", out, torch.cat(ins, 0))
    c.call("default group all_gather_into_tensor after new_group", f)
    c.call("barrier after new_group", lambda: OPS.barrier())


def run_warmup(c, gather=False):
    r, n = c.rank, c.world
    ins = [gen((1001,), "float32", "SUM", "warm-up", gather, j) for j in range(n)]
    if gather:
        out = torch.empty((n * 1001,))
        OPS.all_gather_into_tensor(out, ins[r].clone())
        c.same("warm-up all_gather_into_tensor", out, torch.cat(ins, 0))
    else:
        t = ins[r].clone()
        OPS.all_reduce(t)
        c.same("warm-up all_reduce", t, ref_reduce(ins, "SUM", "float32"), c.tol(ins, "SUM", "float32"))


def run_pool(c):
    """Tensors of the group's pool (conccl.torch.group_pool) go into the ops without staging:
    the results are checked as everywhere, and the group's stats() must count them as
    direct calls, with no op staged. Then a rank that stages while the other does not:
    an error on both."""
    import conccl.torch as ct
    r, n = c.rank, c.world
    pg = dist.distributed_c10d._get_default_group()
    pool = ct.group_pool()
    before = pg.stats()
    k = 301
    ins = [gen((k,), "float32", "SUM", "pool ag", j) for j in range(n)]
    inp, out = pool.empty(k, dtype=torch.float32), pool.empty(n * k, dtype=torch.float32)
    inp.copy_(ins[r])
    c.call("pool all_gather_into_tensor", lambda: OPS.all_gather_into_tensor(out, inp))
    c.same("pool all_gather_into_tensor", out, torch.cat(ins))
    big = [gen((n * k,), "bfloat16", "SUM", "pool rs", j) for j in range(n)]
    rin, rout = pool.empty(n * k, dtype=torch.bfloat16), pool.empty(k, dtype=torch.bfloat16)
    rin.copy_(big[r])
    c.call("pool reduce_scatter_tensor", lambda: OPS.reduce_scatter_tensor(rout, rin, op=_redop("SUM")))
    c.same("pool reduce_scatter_tensor", rout, ref_reduce(big, "SUM", "bfloat16")[r * k:(r + 1) * k])
    ar = [gen((k,), "int64", "MAX", "pool ar", j) for j in range(n)]
    t = pool.empty(k, dtype=torch.int64)
    t.copy_(ar[r])
    c.call("pool all_reduce", lambda: OPS.all_reduce(t, op=_redop("MAX")))
    c.same("pool all_reduce", t, ref_reduce(ar, "MAX", "int64"))
    b = pool.empty(k, dtype=torch.float32)
    b.copy_(ins[r])
    c.call("pool broadcast", lambda: OPS.broadcast(b, src=n - 1))
    c.same("pool broadcast", b, ins[n - 1])
    after = pg.stats()
    c.checks += 1
    if (after["direct_calls"] - before["direct_calls"], after["staged_ops"] - before["staged_ops"]) != (4, 0):
        c.fail("pool", "stats() went from %s to %s: expected 4 direct calls and no staged op" % (before, after))
    # rank 0 gives pool tensors, the others plain ones: their calls differ
    x = pool.empty(k, dtype=torch.float32) if r == 0 else torch.empty(k)
    x.copy_(ins[r])
    c.checks += 1
    try:
        OPS.all_reduce(x)
    except Exception as e:  # noqa: BLE001
        if "same calls" not in str(e):
            c.fail("pool mixed", "the error does not say the calls differ: %s" % str(e)[:300])
        return
    c.fail("pool mixed", "rank 0 on a pool tensor, the others staged: all_reduce returned")


def run_cycles(c, cycles=12):
    """A program that makes and destroys its groups again and again (a test suite's
    fixtures, an elastic restart): each cycle a default group with a reduction (its
    staging), an all-gather, a ring of send/recv (a pair communicator each) and a
    sub-group; then destroy_process_group. The emulated GPUs have 1 GiB each and a
    cycle holds ~300 MiB, so a group whose device memory outlived it fails within a
    few cycles. A tensor carved from the first group's pool stays valid (and its
    data intact) after its group is gone; that group's ops then raise."""
    import conccl.torch as ct
    r, n = c.rank, c.world
    kept = ct.group_pool().empty(1000, dtype=torch.int64)
    kept.copy_(torch.arange(1000, dtype=torch.int64) * (r + 7))
    first = weakref.ref(dist.distributed_c10d._get_default_group())
    for k in range(cycles):
        if k:
            dist.init_process_group("conccl", init_method="file://" + os.path.join(c.tmpdir, "store.cycle%d" % k),
                                    rank=r, world_size=n, timeout=timedelta(seconds=COLL_TIMEOUT_S))
        ins = [gen((333,), "float32", "SUM", "cycle %d" % k, j) for j in range(n)]
        t = ins[r].clone()
        c.call("cycle %d all_reduce" % k, lambda: OPS.all_reduce(t))
        c.same("cycle %d all_reduce" % k, t, ref_reduce(ins, "SUM", "float32"))
        out = torch.empty(n * 333)
        c.call("cycle %d all_gather" % k, lambda: OPS.all_gather_into_tensor(out, ins[r]))
        c.same("cycle %d all_gather" % k, out, torch.cat(ins))
        got = torch.empty(333)

        def ring():
            reqs = [dist.P2POp(dist.isend, ins[r], (r + 1) % n), dist.P2POp(dist.irecv, got, (r - 1) % n)]
            for w in dist.batch_isend_irecv(reqs):
                w.wait()
        c.call("cycle %d send/recv ring" % k, ring)
        c.same("cycle %d send/recv ring" % k, got, ins[(r - 1) % n])
        sub = dist.new_group([q for q in range(n) if q != 0])
        if r != 0:
            u = ins[r].clone()
            c.call("cycle %d sub-group all_reduce" % k, lambda: OPS.all_reduce(u, group=sub))
            c.same("cycle %d sub-group all_reduce" % k, u, ref_reduce(ins[1:], "SUM", "float32"))
        if k + 1 < cycles:  # the last group is the harness's to destroy
            dist.destroy_process_group()
        if k == 0:
            c.checks += 1
            if first() is not None:  # nothing but torch held it: no cycle may keep it (and its memory)
                c.fail("destroyed group", "the first default group was not freed by destroy_process_group")
    c.same("pool tensor after its group is gone", kept, torch.arange(1000, dtype=torch.int64) * (r + 7))
    if r != 0:  # shutdown() (what newer torch's destroy_process_group may call) gives the memory back at once
        sub.shutdown()
        c.checks += 1
        try:
            sub.allreduce([torch.ones(3)]).wait()
            c.fail("shut-down group", "an op of a shut-down group ran")
        except Exception as e:  # noqa: BLE001
            if "shut down" not in str(e):
                c.fail("shut-down group", "the error does not say the group was shut down: %s" % str(e)[:300])


class _PremulLike:
    """What torch >= 2.0 hands a Python backend for _make_nccl_premul_sum(factor): an op equal
    to PREMUL_SUM whose __getstate__() is (PREMUL_SUM, factor). Torch 1.x gives None there,
    so on 1.x this stands in for it, to run the same path."""
    def __init__(self, factor):
        self.factor = factor

    def __eq__(self, other):
        return other == dist.ReduceOp.PREMUL_SUM

    def __hash__(self):
        return 0

    def __getstate__(self):
        return (dist.ReduceOp.PREMUL_SUM, self.factor)


def run_premul_sum(c):
    """PREMUL_SUM (FSDP2's reduce-scatter when its divide factor is not the world size): the
    sum times the factor, on all_reduce, reduce_scatter_tensor, reduce_scatter (lists) and
    reduce. Factors are powers of two, so the product is exact and compared bit for bit
    with the reference sum times the factor. Torch 1.x keeps the factor from Python: there
    dist's own call must be refused naming the version, and the backend's path is run
    through its op with an op shaped as torch 2's. Integer tensors are refused (as NCCL)."""
    from conccl.torch_backend import _Opts
    r, n, last = c.rank, c.world, c.world - 1
    pg = dist.distributed_c10d._get_default_group()
    op = dist._make_nccl_premul_sum(0.25)
    state = op.__getstate__() if hasattr(op, "__getstate__") else None
    native = isinstance(state, tuple) and len(state) == 2 and state[1] is not None
    c.checks += 1
    if not native:  # torch 1.x: refused with the reason, before any move
        try:
            dist.all_reduce(torch.ones(8), op=op)
            c.fail("premul_sum torch 1.x", "all_reduce with PREMUL_SUM returned; its factor cannot be known here")
        except RuntimeError as e:
            if "torch >= 2.0" not in str(e):
                c.fail("premul_sum torch 1.x", "the error does not name the torch it needs: %s" % str(e)[:300])

    def premul(factor):
        return dist._make_nccl_premul_sum(factor) if native else _PremulLike(factor)

    def all_reduce(t, o):
        return dist.all_reduce(t, op=o) if native else pg.allreduce([t], _Opts(reduceOp=o)).wait()

    def reduce_scatter_tensor(out, inp, o):
        if native:
            return dist.reduce_scatter_tensor(out, inp, op=o)
        return pg._reduce_scatter_base(out, inp, _Opts(reduceOp=o)).wait()

    def reduce_scatter(out, ins, o):
        return dist.reduce_scatter(out, ins, op=o) if native else pg.reduce_scatter([out], [ins], _Opts(reduceOp=o)).wait()

    def reduce(t, o):
        if native:
            return dist.reduce(t, dst=last, op=o)
        return pg.reduce([t], _Opts(reduceOp=o, rootRank=last, rootTensor=0)).wait()

    # float64 is reduced outside the engines (gathered, then summed in rank order): its own reference
    for dtype, factor in (("float32", 0.25), ("bfloat16", 0.5), ("float16", 2.0), ("float64", 0.125)):
        make, ref = (gen_other, ref_other) if dtype == "float64" else (gen, ref_reduce)
        tag = ("premul all_reduce", n, dtype)
        name = "all_reduce %s PREMUL_SUM(%g)" % (dtype, factor)

        def f(tag=tag, name=name, dtype=dtype, factor=factor, make=make, ref=ref):
            ins = [make((777,), dtype, "SUM", *tag, j) for j in range(n)]
            t = ins[r].clone()
            all_reduce(t, premul(factor))
            c.same(name, t, ref(ins, "SUM", dtype) * factor)  # a power of two: exact
        c.call(name, f)

        tag = ("premul reduce_scatter_tensor", n, dtype)
        name = "reduce_scatter_tensor %s PREMUL_SUM(%g)" % (dtype, factor)

        def f(tag=tag, name=name, dtype=dtype, factor=factor, make=make, ref=ref):
            k = 129
            ins = [make((n * k,), dtype, "SUM", *tag, j) for j in range(n)]
            inp, out = ins[r].clone(), torch.empty(k, dtype=_dt(dtype))
            reduce_scatter_tensor(out, inp, premul(factor))
            c.same(name, out, (ref(ins, "SUM", dtype) * factor)[r * k:(r + 1) * k])
            c.same(name + " (input untouched)", inp, ins[r])
        c.call(name, f)

    tag = ("premul reduce_scatter list", n)
    name = "reduce_scatter(list) float32 PREMUL_SUM(0.5)"

    def f():
        lists = [[gen((65,), "float32", "SUM", *tag, j, k) for k in range(n)] for j in range(n)]
        out = torch.empty(65)
        reduce_scatter(out, [x.clone() for x in lists[r]], premul(0.5))
        c.same(name, out, ref_reduce([lists[j][r] for j in range(n)], "SUM", "float32") * 0.5)
    c.call(name, f)

    tag = ("premul reduce", n)
    name = "reduce dst=%d float32 PREMUL_SUM(4)" % last

    def f():
        ins = [gen((301,), "float32", "SUM", *tag, j) for j in range(n)]
        t = ins[r].clone()
        reduce(t, premul(4.0))
        c.same(name, t, ref_reduce(ins, "SUM", "float32") * 4.0 if r == last else ins[r])
    c.call(name, f)

    c.checks += 1
    try:
        all_reduce(torch.ones(4, dtype=torch.int32), premul(0.5))
        c.fail("premul_sum int32", "all_reduce of int32 with PREMUL_SUM returned")
    except RuntimeError as e:
        if "floating-point" not in str(e):
            c.fail("premul_sum int32", "the error does not say floating-point: %s" % str(e)[:300])


def check_get_backend(c):
    """torch >= 2.3's init_process_group(device_id=d) asks pg._get_backend(d).supports_splitting;
    a Python group had no answer and init failed. The group is its own backend for its device
    type, does not split, and names the device types it takes for another."""
    g = dist.group.WORLD
    c.checks += 1
    b = g._get_backend(torch.device("cpu"))
    if b is not g or b.supports_splitting or b.supports_time_estimate or b.supports_tensor_alloc(torch.device("cpu")):
        c.fail("_get_backend", "the group is not its own backend for cpu, one that neither splits, estimates "
                               "times nor allocates tensors")
    try:
        g._get_backend(torch.device("cuda", 0))
        c.fail("_get_backend", "a group of CPU tensors gave a backend for cuda")
    except RuntimeError as e:
        if "takes cpu tensors" not in str(e):
            c.fail("_get_backend", "the error does not name the device type taken: %s" % e)


def check_bitwise_refused(c):
    """BAND, BOR, BXOR are refused (as ProcessGroupNCCL refuses them), before any move,
    by a message that names the op (a ReduceOp's repr is only an address)."""
    for op in ("BAND", "BOR", "BXOR"):
        c.checks += 1
        try:
            dist.all_reduce(torch.ones(3, dtype=torch.int32), op=getattr(dist.ReduceOp, op))
            c.fail("bitwise ReduceOp", "all_reduce with %s returned" % op)
        except RuntimeError as e:
            if "ReduceOp.%s" % op not in str(e) or "SUM" not in str(e):
                c.fail("bitwise ReduceOp", "the error does not name %s and the ops taken: %s" % (op, e))


def torch2_missing():
    """Why the torch-2 scenario cannot run with this torch, or None."""
    if torch is None:
        return "torch is not installed"
    import importlib
    try:
        importlib.import_module("torch.distributed._functional_collectives")
        importlib.import_module("torch.distributed.device_mesh")
    except ImportError as e:
        return "torch %s has no functional collectives or device mesh (%s): torch >= 2.2 does" % (torch.__version__, e)
    return None


def run_torch2(c):
    """Torch 2's ways into a process group, as DTensor, tensor parallelism and torch.compile
    use them: the functional collectives (torch.distributed._functional_collectives) and
    DTensor redistributions on a CPU device mesh (Shard -> Replicate an all-gather, Partial ->
    Replicate an all-reduce, Partial -> Shard a reduce-scatter), every element checked."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    r, n = c.rank, c.world
    group = dist.group.WORLD

    def done(t):  # an AsyncCollectiveTensor until waited for
        return funcol.wait_tensor(t) if hasattr(funcol, "wait_tensor") else t

    ins = [gen((6, 5), "float32", "SUM", "funcol", j) for j in range(n)]
    big = [gen((2 * n, 7), "bfloat16", "SUM", "funcol rs", j) for j in range(n)]
    c.call("funcol all_gather_tensor", lambda: c.same(
        "funcol all_gather_tensor", done(funcol.all_gather_tensor(ins[r].clone(), 0, group)), torch.cat(ins, 0)))
    c.call("funcol all_reduce", lambda: c.same(
        "funcol all_reduce", done(funcol.all_reduce(ins[r].clone(), "sum", group)), ref_reduce(ins, "SUM", "float32")))
    c.call("funcol reduce_scatter_tensor", lambda: c.same(
        "funcol reduce_scatter_tensor", done(funcol.reduce_scatter_tensor(big[r].clone(), "sum", 0, group)),
        ref_reduce(big, "SUM", "bfloat16")[2 * r:2 * r + 2]))
    piece = lambda src, dst: gen((2, 5), "float32", "SUM", "funcol a2a", src, dst)  # noqa: E731
    c.call("funcol all_to_all_single", lambda: c.same(
        "funcol all_to_all_single",
        done(funcol.all_to_all_single(torch.cat([piece(r, j) for j in range(n)]), None, None, group)),
        torch.cat([piece(j, r) for j in range(n)])))
    c.call("funcol broadcast", lambda: c.same(
        "funcol broadcast", done(funcol.broadcast(ins[r].clone(), 1, group)), ins[1]))

    try:
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    except ImportError:  # torch 2.2-2.3
        from torch.distributed._tensor import DTensor, Replicate, Shard, distribute_tensor
        from torch.distributed._tensor.placement_types import _Partial as Partial
    mesh = init_device_mesh("cpu", (n,))
    full = gen((4 * n, 3), "float32", "SUM", "dtensor full")  # the same on every rank

    def f():
        d = distribute_tensor(full, mesh, [Shard(0)])
        c.same("DTensor Shard(0) local piece", d.to_local(), full[4 * r:4 * r + 4])
        c.same("DTensor Shard(0) -> Replicate", d.redistribute(mesh, [Replicate()]).to_local(), full)
    c.call("DTensor Shard -> Replicate", f)

    def f():
        p = DTensor.from_local(ins[r].clone(), mesh, [Partial()])
        c.same("DTensor Partial -> Replicate", p.redistribute(mesh, [Replicate()]).to_local(),
               ref_reduce(ins, "SUM", "float32"))
        parts = [gen((2 * n, 5), "float32", "SUM", "dtensor partial", j) for j in range(n)]
        q = DTensor.from_local(parts[r].clone(), mesh, [Partial()])
        c.same("DTensor Partial -> Shard(0)", q.redistribute(mesh, [Shard(0)]).to_local(),
               ref_reduce(parts, "SUM", "float32")[2 * r:2 * r + 2])
    c.call("DTensor Partial -> Replicate / Shard", f)


def run_mismatched(c):
    """Rank r all-reduces 100 * (r + 1) elements: every rank must raise, in bounded time,
    an error that names the disagreement, and no rank may return a result."""
    t = torch.ones(100 * (c.rank + 1))
    t0 = time.monotonic()
    c.checks += 1
    try:
        OPS.all_reduce(t)
    except Exception as e:  # noqa: BLE001 - the type is part of what is checked
        dt, msg = time.monotonic() - t0, str(e)
        if not isinstance(e, RuntimeError) and type(e).__module__.split(".")[0] != "conccl":
            c.fail("mismatched shapes", "raised %s, not RuntimeError or the conccl error: %s" % (type(e), msg[:300]))
        elif dt > KILL_BOUND_S:
            c.fail("mismatched shapes", "raised only after %.1f s: %s" % (dt, msg[:300]))
        elif "same calls" not in msg:
            c.fail("mismatched shapes", "the error does not say the ranks' calls differ: %s" % msg[:400])
        return
    c.fail("mismatched shapes", "all_reduce of %d elements on rank %d returned, while the other ranks gave other "
           "sizes" % (t.numel(), c.rank))


def run_p2p_exit(c):
    """Rank 0 sends (eager: the call returns at once), then leaves: destroy_process_group
    and its process exits. Rank 1 calls recv only a second later: the data must still
    arrive (as a small send over gloo's sockets does), every element. Then rank 1 receives
    from rank 0 again, which is gone: an error naming rank 0, and rank 1's process still
    exits cleanly (its pair's thread must not be inside torch when the interpreter stops:
    Python 3.11 then aborted the process, "terminate called without an active exception")."""
    x = gen((3001,), "float32", "SUM", "p2p exit")
    if c.rank == 0:
        c.call("send, then leave", lambda: dist.send(x.clone(), 1))
        if c.scenario == "p2p_shutdown":  # what newer torch's destroy_process_group calls
            def shut():
                t0 = time.monotonic()
                dist.group.WORLD.shutdown()
                c.checks += 1
                if time.monotonic() - t0 < 0.5:  # the receiver calls recv 1 s after the send
                    c.fail("shutdown", "returned after %.2f s, before the receiver had the data"
                           % (time.monotonic() - t0))
            c.call("shutdown() finishes the send", shut)
        return
    time.sleep(1.0)

    def late():
        got = gen((3001,), "float32", "SUM", "p2p exit before")
        dist.recv(got, 0)
        c.same("recv after the sender left", got, x)
    c.call("recv after the sender left", late)

    def gone():
        c.checks += 1
        try:
            dist.recv(torch.empty(5), 0)
        except RuntimeError as e:
            if "rank 0" not in str(e):
                c.fail("recv from a rank that left", "the error does not name rank 0: %s" % e)
            return
        c.fail("recv from a rank that left", "returned")
    c.call("recv from a rank that left", gone)


def run_killed(c, victim):
    """victim exited (right after init, or after the warm-up calls); the others' next
    collective must raise RuntimeError or conccl.Error, within KILL_BOUND_S, with a message."""
    t = torch.ones(1001)
    c.progress("all_reduce with rank %d dead" % victim)
    t0 = time.monotonic()
    try:
        OPS.all_reduce(t)
        # one all_reduce could in principle complete before the death is seen: try another few
        for _ in range(3):
            OPS.all_reduce(t)
    except Exception as e:  # noqa: BLE001
        dt = time.monotonic() - t0
        c.checks += 1
        kind = type(e).__name__
        mod = type(e).__module__ or ""
        msg = str(e).strip()
        c.killed_error = "%s.%s after %.1f s: %s" % (mod, kind, dt, msg[:600])
        if not (isinstance(e, RuntimeError) or mod.split(".")[0] == "conccl"):
            c.fail("killed rank", "raised %s, not RuntimeError or the conccl error: %s" % (kind, msg[:300]))
        if dt > KILL_BOUND_S:
            c.fail("killed rank", "raised only after %.1f s (timeout=%d s): %s" % (dt, KILL_TIMEOUT_S, msg[:300]))
        if not msg:
            c.fail("killed rank", "%s with an empty message" % kind)
        return
    c.fail("killed rank", "all_reduce with rank %d dead returned (no error) after %.1f s"
           % (victim, time.monotonic() - t0))


def run_p2p(c):
    """send/recv, isend/irecv and batch_isend_irecv: blocking pairs, a ring, both
    directions of a pair at once, several transfers on one pair in order, tensors larger
    than the staging (the p2p scenario runs them with CONCCL_TORCH_P2P=engines and 4 KiB
    of staging per pair); every element checked; a send to itself refused."""
    r, n = c.rank, c.world
    last = n - 1
    for dtype, shape in (("float32", (3001,)), ("int64", (17, 129)), ("uint8", (5,))):
        name = "send/recv 0->%d %s %s" % (last, dtype, shape)

        def f(name=name, dtype=dtype, shape=shape):
            x = gen(shape, dtype, "SUM", "p2p", dtype, shape)
            if r == 0:
                OPS.send(x.clone(), dst=last)
            elif r == last:
                got = gen(shape, dtype, "SUM", "p2p before", dtype, shape)  # random: unwritten shows
                OPS.recv(got, src=0)
                c.same(name, got, x)
        c.call(name, f)

    def ring():
        nxt, prv = (r + 1) % n, (r - 1) % n
        for rnd in range(3):
            mine = gen((2500,), "float32", "SUM", "ring", rnd, r)
            got = gen((2500,), "float32", "SUM", "ring before", rnd, r)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)])
            for w in works:
                w.wait()
            c.same("ring round %d" % rnd, got, gen((2500,), "float32", "SUM", "ring", rnd, prv))
    c.call("batch_isend_irecv ring", ring)

    def both_ways():  # pairs (0, 1), (2, 3), ...: each sends to the other before it receives
        peer = r ^ 1
        if peer >= n:
            return
        mine = gen((4099,), "int32", "SUM", "both", r)
        got = gen((4099,), "int32", "SUM", "both before", r)
        ws = dist.isend(mine, peer)
        wr = dist.irecv(got, peer)
        ws.wait()
        wr.wait()
        c.same("both ways with %d" % peer, got, gen((4099,), "int32", "SUM", "both", peer))
    c.call("isend/irecv both ways", both_ways)

    def blocking_ring():  # every rank sends before it receives, each call blocking: small sends complete
        # eagerly (as on NCCL and gloo), so this ends; 1000 floats: below the eager bytes of either scenario
        nxt, prv = (r + 1) % n, (r - 1) % n
        for rnd in range(3):
            mine = gen((1000,), "float32", "SUM", "blocking ring", rnd, r)
            dist.send(mine, nxt)
            mine.fill_(-1)  # the send's data was taken at the call
            got = gen((1000,), "float32", "SUM", "blocking ring before", rnd, r)
            dist.recv(got, prv)
            c.same("blocking ring round %d" % rnd, got, gen((1000,), "float32", "SUM", "blocking ring", rnd, prv))
    c.call("blocking send then recv, a ring", blocking_ring)

    def in_order():  # three transfers on one pair, received in the order they were sent
        if r == last:
            for k in range(3):
                dist.send(gen((100 + k,), "float32", "SUM", "order", k), dst=0)
        elif r == 0:
            for k in range(3):
                got = torch.empty(100 + k)
                dist.recv(got, src=last)
                c.same("in order %d" % k, got, gen((100 + k,), "float32", "SUM", "order", k))
    c.call("transfers in order", in_order)

    def to_self():
        c.checks += 1
        try:
            dist.send(torch.ones(3), dst=r)
        except RuntimeError:
            return
        c.fail("send to itself", "was taken")
    if c.backend == "conccl":
        c.call("send to itself", to_self)

    def mismatched():  # 0 sends 100 elements, 1 receives 200: an error, not half a tensor
        engines = os.environ.get("CONCCL_TORCH_P2P", "engines") == "engines"
        if r not in (0, 1):
            return
        c.checks += 1
        try:
            if r == 0:
                dist.send(torch.ones(100), dst=1)
                if engines:  # an eager send completed at the call; its error comes at the next send to rank 1
                    t_end = time.monotonic() + COLL_TIMEOUT_S
                    while time.monotonic() < t_end:
                        time.sleep(0.05)
                        dist.send(torch.ones(0), dst=1)  # nothing sent: raises once the pair has failed
            else:
                dist.recv(torch.empty(200), src=0)
        except RuntimeError as e:
            if "100" not in str(e) and "400" not in str(e):
                c.fail("mismatched p2p", "the error does not name the sizes: %s" % e)
            return
        if r == 1 or engines:  # through the store a send is buffered: only the receiver sees it
            c.fail("mismatched p2p", "returned; expected an error")
    if c.backend == "conccl":
        c.call("mismatched p2p", mismatched)
    c.call("barrier after p2p", lambda: OPS.barrier())


def worker(rank, world, scenario, backend, tmpdir):
    res_path = os.path.join(tmpdir, "result.%d.json" % rank)
    c = Checker(rank, world, backend, tmpdir)
    c.scenario = scenario
    c.killed_error = None
    t0 = time.monotonic()
    status, fatal = "ok", None
    try:
        c.progress("import")
        os.environ.setdefault("CONCCL_BACKEND", "emu")  # CPU tensors: the emulated node, even where CUDA is
        if scenario in ("pool", "cycles"):
            os.environ["CONCCL_TORCH_POOL_BYTES"] = str(1 << 20)
        if scenario == "collectives_in_pieces":  # every tensor larger than the staging: it goes in pieces
            os.environ["CONCCL_TORCH_STAGING_BYTES"] = "1024"
        if scenario == "p2p_store":  # send/recv through the group's store
            os.environ["CONCCL_TORCH_P2P"] = "store"
        if scenario == "p2p_engines":  # a communicator per pair; 4 KiB of staging: larger tensors in pieces
            os.environ["CONCCL_TORCH_P2P"] = "engines"
            os.environ["CONCCL_TORCH_P2P_STAGING_BYTES"] = "4096"
            os.environ["CONCCL_TORCH_P2P_EAGER_BYTES"] = "8192"  # sends of more wait for their receiver
        if backend == "conccl":
            import conccl.torch  # noqa: F401 - registers the "conccl" backend
        c.progress("init_process_group")
        timeout = KILL_TIMEOUT_S if scenario.startswith(("killed", "p2p_exit", "p2p_shutdown")) else COLL_TIMEOUT_S
        dist.init_process_group(backend, init_method="file://" + os.path.join(tmpdir, "store"),
                                rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
        c.checks += 1
        if dist.get_rank() != rank or dist.get_world_size() != world:
            c.fail("init", "get_rank/get_world_size %d/%d" % (dist.get_rank(), dist.get_world_size()))
        if dist.get_backend() != backend:
            c.fail("init", "get_backend() is %r" % (dist.get_backend(),))
        if backend == "conccl":  # what init_process_group(device_id=) asks torch 2's groups (CUDA: the H200 run)
            c.call("_get_backend", lambda: check_get_backend(c))
            c.call("bitwise ReduceOp refused", lambda: check_bitwise_refused(c))
        global OPS
        OPS = GlooAdapter() if backend == "gloo" else dist
        if scenario in ("collectives", "collectives_in_pieces"):
            run_collectives(c)
        elif scenario in ("p2p_engines", "p2p_store"):
            run_p2p(c)
        elif scenario == "new_group":
            run_new_group(c)
        elif scenario == "mismatched":
            run_mismatched(c)
        elif scenario == "torch2":
            run_torch2(c)
        elif scenario in ("p2p_exit", "p2p_shutdown"):
            run_p2p_exit(c)
        elif scenario == "pool":
            run_pool(c)
        elif scenario == "cycles":
            run_cycles(c)
        elif scenario.startswith("killed"):
            victim = world - 1
            if scenario == "killed_after_warmup":  # the staging/windows are set up: no message per call
                c.call("warm-up all_reduce", lambda: run_warmup(c))
                c.call("warm-up all_gather_into_tensor", lambda: run_warmup(c, gather=True))
            if rank == victim:
                with open(res_path, "w") as f:
                    json.dump({"rank": rank, "status": "exiting", "failures": [], "skipped": []}, f)
                os._exit(1)
            run_killed(c, victim)
        else:
            raise ValueError(scenario)
        c.progress("destroy_process_group")
        if not scenario.startswith("killed") and scenario not in ("mismatched", "pool"):  # failed: exit without
            dist.destroy_process_group()
        if scenario == "p2p_engines":  # the pairs' threads (and communicators) end with the group
            import gc
            import threading
            gc.collect()
            t_end = time.monotonic() + 10
            while any(t.name.startswith("conccl-p2p") for t in threading.enumerate()) and time.monotonic() < t_end:
                time.sleep(0.05)
            c.checks += 1
            left = [t.name for t in threading.enumerate() if t.name.startswith("conccl-p2p")]
            if left:
                c.fail("destroy_process_group", "pair threads still running: %s" % left)
    except BaseException:  # noqa: BLE001
        status, fatal = "fatal", traceback.format_exc()
    with open(res_path + ".tmp", "w") as f:
        json.dump({"rank": rank, "status": status, "fatal": fatal, "failures": c.failures,
                   "skipped": c.skipped, "checks": c.checks, "calls": c.calls,
                   "killed_error": c.killed_error, "seconds": round(time.monotonic() - t0, 2)}, f)
    os.rename(res_path + ".tmp", res_path)
    sys.stdout.flush()
    sys.stderr.flush()
    code = 0 if status == "ok" and not c.failures else 1
    if scenario in ("p2p_exit", "p2p_shutdown"):  # the interpreter's own exit: atexit handlers, then finalization
        sys.exit(code)
    # a survivor of the killed-rank case must not wait on the dead rank at exit
    os._exit(code)


# --------------------------------------------------------------------------- the parent side

def launch(world, scenario, deadline=DEADLINE_S):
    """Spawn the workers, kill them past the deadline; returns (results, problems)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="conccl-torch-") as tmpdir:
        procs = [ctx.Process(target=worker, args=(r, world, scenario, BACKEND, tmpdir), daemon=True)
                 for r in range(world)]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        end = t0 + deadline
        for p in procs:
            p.join(max(0.0, end - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        progress = {}
        for r in range(world):
            try:
                with open(os.path.join(tmpdir, "progress.%d" % r)) as f:
                    progress[r] = f.read()
            except OSError:
                progress[r] = "(not started)"
        for r in hung:
            procs[r].kill()
        for r in hung:
            procs[r].join(10)
        results, problems = {}, []
        for r, p in enumerate(procs):
            try:
                with open(os.path.join(tmpdir, "result.%d.json" % r)) as f:
                    results[r] = json.load(f)
            except (OSError, ValueError):
                results[r] = None
            if r in hung:
                problems.append("rank %d: still running after the %.0f s deadline (killed), in: %s"
                                % (r, deadline, progress[r]))
            elif results[r] is None:
                problems.append("rank %d: exited with code %s and no result, last in: %s"
                                % (r, p.exitcode, progress[r]))
            else:
                results[r]["exitcode"] = p.exitcode
        elapsed = time.monotonic() - t0
    return results, problems, elapsed


@unittest.skipIf(torch is None, "torch is not installed for this python3 (apt-get install python3-torch)")
class TorchBackendTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        if BACKEND == "conccl":
            import conccl.torch  # noqa: F401 - must register the backend
            if "CONCCL" not in dist.Backend._plugins and not hasattr(dist.Backend, "CONCCL"):
                raise AssertionError('import conccl.torch did not register the "conccl" backend '
                                     "(torch.distributed.Backend.register_backend)")

    def run_scenario(self, world, scenario, expect_exit=None):
        deadline = min(DEADLINE_S, KILL_BOUND_S + 15) if scenario.startswith("killed") else DEADLINE_S
        results, problems, elapsed = launch(world, scenario, deadline)
        failures, skipped, checks, calls = list(problems), set(), 0, 0
        for r, res in results.items():
            if res is None:
                continue
            if expect_exit is not None and r == expect_exit:
                continue
            if res.get("exitcode") not in (0, 1, None):  # 1: its failures, listed; else a crash while it exits
                failures.append("rank %d: exited with code %s after writing its result" % (r, res["exitcode"]))
            if res["status"] != "ok":
                failures.append("rank %d: %s" % (r, res.get("fatal") or res["status"]))
            failures.extend(res.get("failures", []))
            skipped.update(res.get("skipped", []))
            checks += res.get("checks", 0)
            calls += res.get("calls", 0)
        sys.stderr.write("\n[%s %s, %d ranks] %.1f s, %d calls, %d checks, %d failures, %d skipped\n"
                         % (BACKEND, scenario, world, elapsed, calls, checks, len(failures), len(skipped)))
        for s in sorted(skipped):
            sys.stderr.write("  skipped on %s: %s\n" % (BACKEND, s))
        for fl in failures[:60]:
            sys.stderr.write("  FAIL " + fl.rstrip().replace("\n", "\n       ") + "\n")
        if BACKEND == "conccl" and skipped:
            failures.append("skipped on conccl: %s" % sorted(skipped))
        self.assertFalse(failures, "\n%d failures on %s:\n%s" % (len(failures), BACKEND,
                                                                "\n".join(failures[:60])))
        return results

    def test_collectives_2_ranks(self):
        self.run_scenario(2, "collectives")

    def test_collectives_3_ranks(self):  # AVG divides by 3: x / 3 and x * (1 / 3) differ
        self.run_scenario(3, "collectives")

    def test_collectives_4_ranks(self):
        self.run_scenario(4, "collectives")

    def test_collectives_in_pieces_3_ranks(self):  # 1 KiB of staging: every op in several pieces
        self.run_scenario(3, "collectives_in_pieces")

    def test_p2p_on_the_engines_4_ranks(self):  # the default: a communicator per ordered pair
        self.run_scenario(4, "p2p_engines")

    def test_p2p_on_the_engines_3_ranks(self):  # an odd ring; rank 2 has no partner both ways
        self.run_scenario(3, "p2p_engines")

    def test_p2p_through_the_store_3_ranks(self):  # CONCCL_TORCH_P2P=store
        self.run_scenario(3, "p2p_store")

    def test_p2p_send_then_exit_2_ranks(self):  # an eager send reaches a late receiver; clean exits
        if BACKEND != "conccl":
            self.skipTest("conccl's own send/recv")
        self.run_scenario(2, "p2p_exit")

    def test_p2p_send_then_shutdown_2_ranks(self):  # the group's shutdown() waits for the send
        if BACKEND != "conccl":
            self.skipTest("conccl's own send/recv")
        self.run_scenario(2, "p2p_shutdown")

    def test_p2p_setting_is_checked(self):
        from conccl import torch_p2p
        old = os.environ.get("CONCCL_TORCH_P2P")
        try:
            os.environ["CONCCL_TORCH_P2P"] = "engine"
            with self.assertRaises(RuntimeError) as cm:
                torch_p2p.enabled()
            self.assertIn("CONCCL_TORCH_P2P=engine", str(cm.exception))
            self.assertIn('"engines"', str(cm.exception))
            os.environ["CONCCL_TORCH_P2P"] = "store"
            self.assertFalse(torch_p2p.enabled())
            del os.environ["CONCCL_TORCH_P2P"]
            self.assertTrue(torch_p2p.enabled())  # the engines, by default
            self.assertEqual(torch_p2p.eager_bytes(), 4 << 20)  # sends up to 4 MiB complete at the call
            for bad in ("-1", "4M", ""):
                os.environ["CONCCL_TORCH_P2P_EAGER_BYTES"] = bad
                with self.assertRaises(RuntimeError) as cm:
                    torch_p2p.eager_bytes()
                self.assertIn("CONCCL_TORCH_P2P_EAGER_BYTES=%s" % bad, str(cm.exception))
            os.environ["CONCCL_TORCH_P2P_EAGER_BYTES"] = "0"
            self.assertEqual(torch_p2p.eager_bytes(), 0)
            self.assertEqual(torch_p2p.transfer_order(), "host")  # CUDA: each transfer ordered by the pair's thread
            os.environ["CONCCL_TORCH_P2P_ORDER"] = "streams"
            with self.assertRaises(RuntimeError) as cm:
                torch_p2p.transfer_order()
            self.assertIn("CONCCL_TORCH_P2P_ORDER=streams", str(cm.exception))
            os.environ["CONCCL_TORCH_P2P_ORDER"] = "stream"
            self.assertEqual(torch_p2p.transfer_order(), "stream")
        finally:
            os.environ.pop("CONCCL_TORCH_P2P_EAGER_BYTES", None)
            os.environ.pop("CONCCL_TORCH_P2P_ORDER", None)
            if old is None:
                os.environ.pop("CONCCL_TORCH_P2P", None)
            else:
                os.environ["CONCCL_TORCH_P2P"] = old

    def test_exit_flush_stops_every_pair_before_waiting(self):
        # A pair whose thread cannot end (its receiver never called recv) waits out the
        # flush's deadline; the other pairs, told to stop first, end meanwhile and are
        # not named unfinished.
        import queue
        import threading
        from conccl import torch_p2p

        class GroupComm:  # the group's communicator: rank 5's process has gone
            def ranks_gone(self):
                return [5]
        group_comm = GroupComm()

        def pair(name, hangs, peer=1):
            p = object.__new__(torch_p2p._Pair)  # the real stop()/finish()/peer_gone(), a thread of our own
            p.src, p.dst, p.timeout_ms, p.jobs = name, 0, 1500, queue.Queue()
            p.peer, p._group_comm = peer, weakref.ref(group_comm)

            def run():
                while True:
                    job = p.jobs.get()
                    if job is None and not hangs:
                        time.sleep(0.2)  # the transfers asked for before the stop
                        return
            p.thread = threading.Thread(target=run, daemon=True)
            p.thread.start()
            return p

        pairs = [pair("stuck", True), pair("a", False), pair("b", False)]
        t0 = time.monotonic()
        wait_s, left = torch_p2p._finish(pairs)
        self.assertEqual((wait_s, left), (1.5, ["stuck->0"]))
        self.assertLess(time.monotonic() - t0, 5.0)
        # A pair whose peer's process has gone is not waited for: named at once, saying why.
        t0 = time.monotonic()
        wait_s, left = torch_p2p._finish([pair("orphan", True, peer=5), pair("c", False)])
        self.assertEqual(left, ["orphan->0 (rank 5's process has gone)"])
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_each_process_drives_its_current_cuda_device(self):
        # A node of several GPUs: the driver's order (the nv device's GPU indices) is
        # not CUDA's, so the group's GPU is found by CUDA ordinal (matched by UUID).
        import conccl
        from conccl import torch_backend

        class Node:  # the driver lists 4 GPUs; CUDA numbers them otherwise; one is hidden from CUDA
            gpu_count = 4
            def cuda_ordinal(self, g):
                if g == 3:
                    raise conccl.Error("unavailable", "no CUDA device has this GPU's UUID")
                return {0: 2, 1: 0, 2: 1}[g]

        node = Node()
        self.assertEqual([torch_backend._gpu_of_cuda_device(node, c) for c in (0, 1, 2)], [1, 2, 0])
        with self.assertRaises(RuntimeError) as cm:
            torch_backend._gpu_of_cuda_device(node, 5)
        msg = str(cm.exception)
        for part in ("cuda:5", "GPU 0 is cuda:2", "GPU 3: ", "UUID", "torch.cuda.set_device(local_rank)"):
            self.assertIn(part, msg)

        class OneGpu:  # one GPU: taken without asking CUDA
            gpu_count = 1
            def cuda_ordinal(self, g):
                raise AssertionError("not asked")
        self.assertEqual(torch_backend._gpu_of_cuda_device(OneGpu(), 0), 0)

    @unittest.skipIf(torch2_missing(), torch2_missing() or "")
    def test_torch2_functional_collectives_and_dtensor_3_ranks(self):
        self.run_scenario(3, "torch2")

    def test_groups_made_and_destroyed_again_and_again_3_ranks(self):  # device memory goes back each time
        if BACKEND != "conccl":
            self.skipTest("conccl's own memory")
        self.run_scenario(3, "cycles")

    def test_new_group_4_ranks(self):
        self.run_scenario(4, "new_group")

    def test_pool_tensors_skip_the_staging_3_ranks(self):
        if BACKEND != "conccl":
            self.skipTest("the pool is conccl's")
        self.run_scenario(3, "pool")

    def test_mismatched_shapes_2_ranks(self):  # 100 and 200 elements: an error on both, not corrupted memory
        self.run_scenario(2, "mismatched")

    def test_killed_rank_3_ranks(self):  # rank 2 exits right after init_process_group
        results = self.run_scenario(3, "killed", expect_exit=2)
        for r in (0, 1):
            if results.get(r):
                sys.stderr.write("  rank %d saw: %s\n" % (r, results[r].get("killed_error")))

    def test_killed_rank_after_warmup_2_ranks(self):  # rank 1 exits after an all_reduce and an all_gather
        results = self.run_scenario(2, "killed_after_warmup", expect_exit=1)
        if results.get(0):
            sys.stderr.write("  rank 0 saw: %s\n" % (results[0].get("killed_error"),))


if __name__ == "__main__":
    unittest.main()
