"""tests/python/test_reductions.py - the reductions of the Python package on the emulated node.

Communicator.reduce_scatter / all_reduce / reduce on conccl Buffers for every element
type x operator, compared bit for bit with a numpy reference computed in rank order
(bfloat16 and float16 widened to float32, accumulated in float32, rounded once: the
library's arithmetic, include/conccl/conccl.h); the torch.distributed-shaped tensor
forms on CPU tensors viewing the device's buffers; one process per rank; the errors.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=python and
CONCCL_LIBRARY=<build>/src/libconccl.so.
"""
import subprocess
import sys
import unittest

import conccl

try:
    import numpy as np
except ImportError:  # the Buffer tests need numpy for their reference
    np = None

TYPES = ["float32", "bfloat16", "float16", "int32", "int64", "uint8"]
OPS = ["sum", "prod", "max", "min", "avg"]


def _storage(dtype):
    """The numpy type an element is stored as (bfloat16: its 16 bits)."""
    return {"float32": np.float32, "bfloat16": np.uint16, "float16": np.float16, "int32": np.int32,
            "int64": np.int64, "uint8": np.uint8}[dtype]


def _bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(f32):
    # Round to nearest even on the upper 16 bits (no NaN among these inputs).
    b = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def random_elements(dtype, count, seed):
    """count elements of dtype (stored as _storage(dtype)): floats in [-2, 2) so that
    products of a few stay finite; integers over their whole range (sums and products wrap)."""
    rng = np.random.default_rng(seed)
    if dtype in ("float32", "bfloat16", "float16"):
        f = rng.uniform(-2.0, 2.0, count).astype(np.float32)
        return _f32_to_bf16(f) if dtype == "bfloat16" else f.astype(_storage(dtype))
    info = np.iinfo(_storage(dtype))
    return rng.integers(info.min, info.max, count, dtype=_storage(dtype), endpoint=True)


def reference(dtype, op, inputs):
    """The reduction of inputs (arrays of one rank each) in rank order, as the library
    computes it: floats in float32 step by step, bfloat16/float16 rounded once at the
    end; integers wrapping, avg truncating toward zero; of equal values the earlier kept."""
    n = len(inputs)
    floating = dtype in ("float32", "bfloat16", "float16")
    if dtype == "bfloat16":
        xs = [_bf16_to_f32(x) for x in inputs]
    elif floating:
        xs = [x.astype(np.float32) for x in inputs]
    else:
        xs = [x.copy() for x in inputs]
    acc = xs[0].copy()
    with np.errstate(over="ignore"):
        for x in xs[1:]:
            if op in ("sum", "avg"):
                acc = acc + x
            elif op == "prod":
                acc = acc * x
            elif op == "max":
                acc = np.where(x > acc, x, acc)
            else:
                acc = np.where(x < acc, x, acc)
        if op == "avg":
            if floating:
                acc = acc / np.float32(n)
            else:  # floor division, then toward zero for negative quotients with a remainder
                q = acc // acc.dtype.type(n)
                acc = q + ((acc - q * acc.dtype.type(n) != 0) & (acc < 0)).astype(acc.dtype)
    if dtype == "bfloat16":
        return _f32_to_bf16(acc)
    return acc.astype(_storage(dtype))


@unittest.skipIf(np is None, "numpy is not installed (Debian: apt-get install python3-numpy)")
class BufferReductionTest(unittest.TestCase):
    """The NCCL-shaped forms: conccl Buffers, one per rank, counts in elements."""

    n = 4

    def setUp(self):
        self.dev = conccl.Device("emu", settings="preset=mi300x")
        self.comm = conccl.Communicator(self.dev, range(self.n))

    def tearDown(self):
        self.dev.close()

    def run_call(self, call, dtype, op, count, seed, root=0, in_place=False, none_off_root=False, enums=False):
        """One call with fresh inputs; returns "" or what went wrong."""
        n, es = self.n, np.dtype(_storage(dtype)).itemsize
        send_elems = count * n if call == "reduce_scatter" else count
        inputs = [random_elements(dtype, send_elems, seed * 131 + r) for r in range(n)]
        send = [self.dev.alloc(r, send_elems * es) for r in range(n)]
        recv = [self.dev.alloc(r, count * es) for r in range(n)]
        stale = b"\xa5" * (count * es)
        for r in range(n):
            send[r].upload(inputs[r].tobytes())
            recv[r].upload(stale)
        into = list(recv)
        if in_place:
            into = [send[r].view(r * count * es, count * es) if call == "reduce_scatter" else send[r]
                    for r in range(n)]
        if none_off_root:
            into = [b if r == root else None for r, b in enumerate(into)]
        dt = conccl.DataType[dtype.upper()] if enums else dtype
        rop = conccl.RedOp[op.upper()] if enums else op
        if call == "reduce_scatter":
            self.comm.reduce_scatter(send, into, count, dt, rop)
        elif call == "all_reduce":
            self.comm.all_reduce(send, into, count, dt, rop)
        else:
            self.comm.reduce(send, into, count, dt, rop, root)
        what = f"{call} {dtype} {op} count {count} root {root}{' in place' if in_place else ''}"
        for r in range(n):
            if call == "reduce" and r != root:
                if recv[r].download() != stale:
                    return f"{what}: rank {r}'s recv was written"
                continue
            src = into[r]
            got = np.frombuffer(src.download(), dtype=_storage(dtype))
            at = r * count if call == "reduce_scatter" else 0
            want = reference(dtype, op, [x[at:at + count] for x in inputs])
            if got.tobytes() != want.tobytes():
                bad = int(np.nonzero(got.view(np.uint8) != want.view(np.uint8))[0][0]) // es
                return f"{what}: rank {r} element {bad}: {got[bad]!r}, want {want[bad]!r}"
        for b in send + recv:
            b.free()
        return ""

    def test_every_type_and_op_bit_exact(self):
        seed = 1
        for call in ("reduce_scatter", "all_reduce", "reduce"):
            for dtype in TYPES:
                for op in OPS:
                    seed += 1
                    with self.subTest(call=call, dtype=dtype, op=op):
                        self.assertEqual(self.run_call(call, dtype, op, 1003, seed, root=seed % self.n,
                                                       enums=seed % 2 == 0), "")

    def test_in_place_none_off_root_and_two_step(self):
        seed = 500
        for call in ("reduce_scatter", "all_reduce", "reduce"):
            for dtype in ("float32", "bfloat16", "int64"):
                seed += 1
                self.assertEqual(self.run_call(call, dtype, "sum", 2049, seed, root=3, in_place=True), "")
        self.assertEqual(self.run_call("reduce", "float16", "max", 999, 7, root=1, none_off_root=True), "")
        # 256 KiB and more per rank: the reduce-scatter + all-gather all-reduce.
        self.assertEqual(self.run_call("all_reduce", "float32", "avg", (64 << 10) + 3, 8), "")

    def test_errors_name_the_fix(self):
        comm, dev, n = self.comm, self.dev, self.n
        send = [dev.alloc(r, 4096) for r in range(n)]
        recv = [dev.alloc(r, 1024) for r in range(n)]
        cases = [
            (lambda: comm.all_reduce(send, recv, 256, 3, "sum"), "dtype 3: reductions take 'float32'"),
            (lambda: comm.all_reduce(send, recv, 256, "float64", "sum"), "float64 have no reduction here"),
            (lambda: comm.all_reduce(send, recv, 256, "float32", 9), "op 9: one of 'sum'"),
            (lambda: comm.all_reduce(send, recv, 256, "float32", "band"), "op 'band'"),
            (lambda: comm.all_reduce(send, recv, 0, "float32", "sum"),
             "conccl_all_reduce: count must be > 0 elements"),
            (lambda: comm.reduce_scatter(send, recv, 257, "float32", "sum"),
             "send buffer has 4096 bytes; 1028 elements of float need 4112"),
            (lambda: comm.all_reduce(None, recv, 256, "float32", "sum"), "send: give a list of one per rank"),
            (lambda: comm.all_reduce(send[:2], recv, 256, "float32", "sum"), "give one per rank (4 ranks), not 2"),
            (lambda: comm.reduce(send, None, 256, "float32", "sum", 0), "recv: give a list of one per rank"),
            (lambda: comm.reduce(send, [None] * n, 256, "float32", "sum", 2), "recv[2]: no live buffer"),
            (lambda: comm.reduce(send, recv, 256, "float32", "sum", n), f"root {n} is not a rank"),
            (lambda: comm.reduce_scatter([object()] * n, recv, 256, "float32", "sum"), "send[0] must be a conccl.Buffer"),
        ]
        for call, says in cases:
            with self.subTest(says=says):
                with self.assertRaises(conccl.Error) as cm:
                    call()
                self.assertEqual(cm.exception.status, "invalid_argument" if "no live" not in says else "not_found")
                self.assertIn(says, cm.exception.message)
        with self.assertRaises(conccl.Error) as cm:
            comm.all_reduce(send, recv, -1, "float32", "sum")
        self.assertEqual(cm.exception.status, "out_of_range")
        # Still usable.
        self.assertEqual(self.run_call("all_reduce", "uint8", "prod", 100, 9), "")


def _torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None, None
    return torch, dist


class TensorReductionTest(unittest.TestCase):
    """torch.distributed's shapes on CPU tensors viewing the device's buffers
    (torch.from_dlpack(device.alloc(gpu, nbytes)))."""

    n = 3

    def setUp(self):
        self.torch, self.dist = _torch()
        if self.torch is None:
            self.skipTest("PyTorch is not installed (Debian: apt-get install python3-torch)")
        self.dev = conccl.Device("emu", settings="preset=mi300x")
        self.comm = conccl.Communicator(self.dev, range(self.n))
        self.gen = self.torch.Generator().manual_seed(5)

    def tearDown(self):
        self.dev.close()

    def tensor(self, gpu, shape, dtype):
        """Random values of dtype in a tensor over a new buffer of `gpu`."""
        torch = self.torch
        t = torch.from_dlpack(self.dev.alloc(gpu, torch.empty(shape, dtype=dtype).numel() *
                                             torch.empty(0, dtype=dtype).element_size())).view(dtype).view(shape)
        if dtype.is_floating_point:
            t.copy_((torch.rand(shape, generator=self.gen) * 4 - 2).to(dtype))
        else:
            lo, hi = (1, 4) if dtype == torch.uint8 else (-1000, 1000)  # small: no overflow in torch's reference
            t.copy_(torch.randint(lo, hi, shape, generator=self.gen).to(dtype))
        return t

    def reference(self, tensors, op):
        """In rank order; floats accumulated in float32 and cast once at the end."""
        torch = self.torch
        dtype = tensors[0].dtype
        xs = [t.float() if dtype.is_floating_point else t.clone() for t in tensors]
        acc = xs[0]
        for x in xs[1:]:
            acc = {"sum": lambda: acc + x, "avg": lambda: acc + x, "prod": lambda: acc * x,
                   "max": lambda: torch.where(x > acc, x, acc), "min": lambda: torch.where(x < acc, x, acc)}[op]()
        if op == "avg":
            acc = acc / len(xs) if dtype.is_floating_point else torch.div(acc, len(xs), rounding_mode="trunc")
        return acc.to(dtype)

    def same_bits(self, a, b, what):
        self.assertEqual(a.dtype, b.dtype, what)
        self.assertTrue(torch_equal_bits(self.torch, a, b), f"{what}: {a.flatten()[:4]} vs {b.flatten()[:4]}")

    def test_all_reduce_in_place(self):
        torch, dist = self.torch, self.dist
        ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}
        k = 0
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8):
            for name, top in ops.items():
                k += 1
                tensors = [self.tensor(r, (7, 129), dtype) for r in range(self.n)]
                want = self.reference(tensors, name)
                # torch.distributed.ReduceOp, conccl.RedOp and names all name the operator.
                op = (top, conccl.RedOp[name.upper()], name)[k % 3]
                if k % 2:
                    self.comm.all_reduce(tensors, op)
                else:
                    self.comm.all_reduce(tensors, op=op)
                for r in range(self.n):
                    self.same_bits(tensors[r], want, f"{dtype} {name} rank {r}")
        # The default operator is the sum, as torch.distributed's.
        tensors = [self.tensor(r, (50,), torch.float32) for r in range(self.n)]
        want = self.reference(tensors, "sum")
        self.comm.all_reduce(tensors)
        self.same_bits(tensors[1], want, "default op")

    def test_reduce_scatter_tensor(self):
        torch, dist = self.torch, self.dist
        n = self.n
        for dtype, op, name in ((torch.bfloat16, dist.ReduceOp.AVG, "avg"), (torch.float32, "max", "max"),
                                (torch.int64, dist.ReduceOp.SUM, "sum"), (torch.float16, "prod", "prod")):
            inputs = [self.tensor(r, (n * 4, 333), dtype) for r in range(n)]
            outputs = [self.tensor(r, (4, 333), dtype) for r in range(n)]
            sent = [t.clone() for t in inputs]
            self.comm.reduce_scatter_tensor(outputs, inputs, op=op)
            for r in range(n):
                want = self.reference([t[r * 4:(r + 1) * 4] for t in sent], name)
                self.same_bits(outputs[r], want, f"{dtype} {name} rank {r}")
                self.same_bits(inputs[r], sent[r], "the input is not written")

    def test_reduce_to_dst(self):
        torch, dist = self.torch, self.dist
        for dst, dtype, op, name in ((2, torch.float32, dist.ReduceOp.SUM, "sum"),
                                     (0, torch.bfloat16, dist.ReduceOp.MIN, "min"),
                                     (1, torch.int32, dist.ReduceOp.PRODUCT, "prod")):
            tensors = [self.tensor(r, (1000,), dtype) for r in range(self.n)]
            sent = [t.clone() for t in tensors]
            if dst == 1:
                self.comm.reduce(tensors, dst, op)
            else:
                self.comm.reduce(tensors, dst=dst, op=op)
            self.same_bits(tensors[dst], self.reference(sent, name), f"{dtype} {name} on dst")
            for r in range(self.n):
                if r != dst:
                    self.same_bits(tensors[r], sent[r], f"rank {r} is not dst: left as it was")

    def test_errors(self):
        torch, dist = self.torch, self.dist
        n = self.n
        f32 = [self.tensor(r, (n * 8,), torch.float32) for r in range(n)]
        small = [self.tensor(r, (8,), torch.float32) for r in range(n)]
        f64 = [torch.from_dlpack(self.dev.alloc(r, 64)).view(torch.float64) for r in range(n)]
        cases = [
            (lambda: self.comm.all_reduce(f64), "is torch.float64: reductions take float32, bfloat16"),
            (lambda: self.comm.all_reduce(f32, dist.ReduceOp.BAND), "only SUM, PRODUCT, MAX, MIN and AVG"),
            (lambda: self.comm.all_reduce(f32, "mean"), "op 'mean'"),
            (lambda: self.comm.reduce_scatter_tensor(small, small), "must be world size (3) times output's 8"),
            (lambda: self.comm.reduce_scatter_tensor(small, f32[:2]), "give one per rank (3 ranks), not 2"),
            (lambda: self.comm.reduce_scatter(small, f32, 8, "float32", "sum"), "reduce_scatter_tensor(output"),
            (lambda: self.comm.reduce(small, n), f"dst {n}: a rank of this communicator"),
            (lambda: self.comm.all_reduce(small[:2] + [f32[2]]), "every rank's tensor must have the same elements"),
            (lambda: self.comm.all_reduce(small[:2] + [small[2].view(torch.int32)]),
             "tensor (rank 2) is torch.int32 and rank 0's torch.float32: give every rank's tensors one dtype"),
            (lambda: self.comm.reduce_scatter_tensor([t.view(torch.int32) for t in small], f32),
             "output is torch.int32 and input torch.float32 (rank 0)"),
            (lambda: self.comm.all_reduce([torch.ones(8)] * n), "torch.from_dlpack(device.alloc(gpu, nbytes))"),
            (lambda: self.comm.all_reduce(small[0]), "one per rank"),
        ]
        for call, says in cases:
            with self.subTest(says=says):
                with self.assertRaises(conccl.Error) as cm:
                    call()
                self.assertEqual(cm.exception.status, "invalid_argument")
                self.assertIn(says, cm.exception.message)
        # Empty tensors: nothing to reduce, as torch.distributed.
        self.comm.all_reduce([torch.empty(0)] * n)


def torch_equal_bits(torch, a, b):
    """Bitwise equality (NaN equals NaN of the same bits), for any element size."""
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.shape == b.shape and torch.equal(a.contiguous().view(view), b.contiguous().view(view))


class OneProcessPerRankTest(unittest.TestCase):
    def test_buffers_and_tensors(self):
        # Each rank a process of its own, its buffers and tensors alone; every rank
        # makes every rank's inputs from their seeds to check its own result.
        torch, _ = _torch()
        if torch is None or np is None:
            self.skipTest("needs numpy and PyTorch (Debian: apt-get install python3-numpy python3-torch)")
        rank_script = """
import sys, numpy as np, torch, torch.distributed as dist, conccl
sys.path.insert(0, sys.argv[4])
from test_reductions import random_elements, reference
r, n, uid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with conccl.Device("emu", settings="preset=mi300x", process_slot=r) as dev:
    comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=r, timeout_ms=30000)
    count = 1001
    for k, (call, dtype, op) in enumerate([("all_reduce", "bfloat16", "sum"), ("reduce_scatter", "float32", "avg"),
                                           ("reduce", "int64", "prod"), ("all_reduce", "int32", "max")]):
        elems = count * n if call == "reduce_scatter" else count
        inputs = [random_elements(dtype, elems, 100 * k + q) for q in range(n)]
        send, recv = dev.alloc(r, inputs[r].nbytes), dev.alloc(r, inputs[r].nbytes // elems * count)
        send.upload(inputs[r].tobytes())
        root = k % n
        if call == "reduce":
            comm.reduce(send, recv if r == root else None, count, dtype, op, root)
        else:
            getattr(comm, call)(send, recv, count, dtype, op)
        if call == "reduce" and r != root:
            continue
        at = r * count if call == "reduce_scatter" else 0
        want = reference(dtype, op, [x[at:at + count] for x in inputs])
        assert recv.download() == want.tobytes(), (call, dtype, op)
    # Tensors: this rank's alone.
    def tensor(shape, seed):
        t = torch.from_dlpack(dev.alloc(r, 4 * int(np.prod(shape)))).view(torch.float32).view(shape)
        t.copy_(torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 4 - 2)
        return t
    t = tensor((n, 300), 10 + r)
    comm.all_reduce(t, dist.ReduceOp.MAX)
    want = tensor((n, 300), 10)
    for q in range(1, n):
        x = tensor((n, 300), 10 + q)
        want = torch.where(x > want, x, want)
    assert torch.equal(t, want), "all_reduce"
    inp, out = tensor((n, 300), 20 + r), tensor((300,), 0)
    comm.reduce_scatter_tensor(out, inp)
    want = tensor((n, 300), 20)[r].clone()
    for q in range(1, n):
        want = want + tensor((n, 300), 20 + q)[r]
    assert torch.equal(out, want), "reduce_scatter_tensor"
    t = tensor((300,), 30 + r)
    comm.reduce(t, 1, op="min")
    if r == 1:
        want = tensor((300,), 30)
        for q in range(1, n):
            x = tensor((300,), 30 + q)
            want = torch.where(x < want, x, want)
        assert torch.equal(t, want), "reduce"
    else:
        assert torch.equal(t, tensor((300,), 30 + r)), "reduce wrote a rank other than dst"
print("ok", r)
"""
        here = __import__("os").path.dirname(__import__("os").path.abspath(__file__))
        for n in (2, 3):
            uid = conccl.unique_id()
            procs = [subprocess.Popen([sys.executable, "-c", rank_script, str(r), str(n), uid, here],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
            for r, p in enumerate(procs):
                out, err = p.communicate(timeout=120)
                self.assertEqual(p.returncode, 0, f"{n} ranks, rank {r}: {err}")
                self.assertEqual(out.strip(), f"ok {r}")


if __name__ == "__main__":
    unittest.main()
