"""tests/python/test_torch_pool.py - conccl.torch.SymmetricPool on the emulated node.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=python and
CONCCL_LIBRARY=<build>/src/libconccl.so. What runs without CUDA: a pool of two
ranks (one process each), tensors carved from it at the same offsets on both,
the tensor calls on them through the window with no message between the ranks,
tensors from outside the pool staged through it (every byte checked), the
Buffer of a pool tensor, and the refusals. The torch.cuda.MemPool form needs
CUDA, the nv backend and PyTorch >= 2.5: CudaMemPoolTest runs
examples/python/torch_pool_allgather.py there and is skipped elsewhere, saying why.
"""
import os
import subprocess
import sys
import unittest

import conccl


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


torch = _torch()

RANK_SCRIPT = r'''
import sys, torch, conccl
import conccl.torch as ct
r, n, uid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
k, m = 3, 1001  # an (n*k, m) int32 output, a (k, m) input


def data(s, rnd, shape):
    g = torch.Generator().manual_seed(1000 * rnd + s)
    return torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=g)


def messages(st):
    return st["bootstrap_messages_sent"] + st["bootstrap_messages_received"]


def check_gathered(out, rnd, rows=k):
    """out holds every rank's round-rnd input of `rows` rows, in rank order."""
    for s in range(n):
        assert torch.equal(out[s * rows:(s + 1) * rows], data(s, rnd, (rows, m))), (rnd, s)


def gather_rounds(out, inp, rounds):
    """An all_gather_into_tensor per round, every byte checked: one window call
    each and no message between the ranks. The stats after."""
    before = comm.stats()
    for rnd in rounds:
        inp.copy_(data(r, rnd, (k, m)))
        comm.all_gather_into_tensor(out, inp)
        check_gathered(out, rnd)
    after = comm.stats()
    assert messages(after) == messages(before), (before, after)
    assert after["window_calls"] - before["window_calls"] == len(rounds), (before, after)
    return after


def refused(fn, says, status="invalid_argument"):
    try:
        fn()
    except conccl.Error as e:
        assert e.status == status and says in e.message, (e.status, e.message, says)
        return
    raise AssertionError("not refused: " + says)


with conccl.Device("emu", settings="preset=mi300x", process_slot=r) as dev:
    comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=r, timeout_ms=20000)
    refused(lambda: ct.SymmetricPool(comm, -1), "nbytes", "out_of_range")
    pool = ct.SymmetricPool(comm, (4 << 20) + 3)
    assert ct.pool_of(comm) is pool
    st = pool.stats()
    assert st["bytes"] == (4 << 20) + 512 and st["used"] == 0 and st["allocations"] == 0, st
    # No torch.cuda.MemPool here: the reason, not a crash.
    refused(lambda: pool.mempool, "use pool.empty", "unavailable")

    # ---- pool tensors: the same offsets on every rank; the fast form ----
    inp = pool.empty((k, m), dtype=torch.int32)
    out = pool.empty(n * k, m, dtype=torch.int32)
    spare = pool.empty(10)
    offsets = [pool._ptr(t) - pool.base for t in (inp, out, spare)]
    assert all(o % 512 == 0 for o in offsets), offsets
    assert pool.owns(inp) and pool.owns(out[k:]) and not pool.owns(torch.empty(4))
    del spare  # back to the heap: the next tensor of its size takes its place
    again = pool.empty(10)
    offsets.append(pool._ptr(again) - pool.base)
    assert offsets[3] == offsets[2], offsets
    gather_rounds(out, inp, range(5))

    # ---- tensors from outside the pool: staged through it, the slow form ----
    used = pool.stats()["used"]
    pin, pout = torch.empty((k, m), dtype=torch.int32), torch.zeros((n * k, m), dtype=torch.int32)
    after = gather_rounds(pout, pin, range(5, 9))
    staged = pool.stats()["used"] - used
    assert staged >= (n + 1) * k * m * 4, staged  # one staging area, kept for the next calls
    # Mixed: a pool output and a plain input (only the input is staged); a
    # non-contiguous input of the pool (staged: a Buffer is one range).
    pin.copy_(data(r, 9, (k, m)))
    comm.all_gather_into_tensor(out, pin)
    check_gathered(out, 9)
    wide = pool.empty((m, 2 * k), dtype=torch.int32)
    cols = wide[:, :k].t()  # (k, m), not contiguous
    cols.copy_(data(r, 10, (k, m)))
    comm.all_gather_into_tensor(pout, cols)
    check_gathered(pout, 10)
    # all_to_all_single and broadcast of plain tensors.
    a_in, a_out = data(r, 11, (n * k, m)), torch.zeros((n * k, m), dtype=torch.int32)
    comm.all_to_all_single(a_out, a_in)
    for s in range(n):
        assert torch.equal(a_out[s * k:(s + 1) * k], data(s, 11, (n * k, m))[r * k:(r + 1) * k]), s
    b = data(r, 12, (k, m))
    comm.broadcast(b, 1)
    assert torch.equal(b, data(1, 12, (k, m)))
    # gather and scatter of plain tensors: this rank's staged, and the root's list too
    # (random before, so a tensor left alone shows); then pool tensors, the root's
    # list the chunks of a pool tensor (written in place).
    g_in = data(r, 15, (k, m))
    g_list = [data(s, 16, (k, m)) for s in range(n)] if r == n - 1 else None
    comm.gather(g_in, g_list, dst=n - 1)
    if r == n - 1:
        for s in range(n):
            assert torch.equal(g_list[s], data(s, 15, (k, m))), ("gather", s)
    s_out = data(r, 17, (k, m))
    s_list = [data(s, 18, (k, m)) for s in range(n)] if r == 1 else None
    comm.scatter(s_out, s_list, src=1)
    assert torch.equal(s_out, data(r, 18, (k, m))), "scatter"
    inp.copy_(data(r, 19, (k, m)))
    comm.gather(inp, list(out.chunk(n)) if r == 0 else None, 0)
    if r == 0:
        check_gathered(out, 19)
    # The symmetric form: every rank names the root's pool tensor (same offset everywhere).
    s_out2 = pool.empty((k, m), dtype=torch.int32)
    comm.scatter(s_out2, out, 0)
    assert torch.equal(s_out2, data(r, 19, (k, m))), "scatter of pool tensors"
    inp.copy_(data(r, 20, (k, m)))
    comm.gather(inp, out, n - 1)
    if r == n - 1:
        check_gathered(out, 20)
    del s_out2
    # A bigger call grows the staging area (every rank alike).
    big_in, big_out = data(r, 13, (4 * k, m)), torch.zeros((4 * n * k, m), dtype=torch.int32)
    comm.all_gather_into_tensor(big_out, big_in)
    check_gathered(big_out, 13, rows=4 * k)
    # Still no message between the ranks.
    assert messages(comm.stats()) == messages(after)

    # ---- the Buffer of a pool tensor, for the Buffer calls ----
    inp.copy_(data(r, 14, (k, m)))
    comm.all_gather(pool.buffer(inp), pool.buffer(out), k * m * 4)
    check_gathered(out, 14)
    bb = pool.buffer(out[k:2 * k])
    assert bb.size == k * m * 4 and bb.va == pool._whole.va + offsets[1] + k * m * 4
    refused(bb.free, "view of another")
    refused(pool._whole.free, "close the pool")
    refused(lambda: pool.buffer(pin), "does not lie in this pool")
    refused(lambda: pool.buffer(cols), "not contiguous")
    refused(lambda: pool.buffer("x"), "torch tensor")

    # ---- out of heap ----
    refused(lambda: pool.empty(8 << 20), "out of heap", "resource_exhausted")

    # ---- lifetime: dropping tensors gives their bytes back; close() is collective ----
    now = pool.stats()["used"]
    del inp, out, again, wide, cols, bb
    assert pool.stats()["used"] < now
    pool.close()
    pool.close()  # twice: nothing
    assert ct.pool_of(comm) is None
    refused(lambda: pool.empty(4), "closed")
    refused(lambda: pool.stats(), "closed")
    # Without a pool, plain CPU tensors are refused again (the engines cannot reach them).
    refused(lambda: comm.all_gather_into_tensor(pout, pin), "torch.from_dlpack(device.alloc")
    # A new pool on the same communicator works (its own window).
    with ct.SymmetricPool(comm, 1 << 20) as p2:
        comm.all_gather_into_tensor(pout, pin)
        check_gathered(pout, 9)
        assert p2.stats()["used"] > 0
print("offsets", " ".join(map(str, offsets)))
'''


@unittest.skipIf(torch is None, "PyTorch is not installed (Debian: apt-get install python3-torch)")
class SymmetricPoolTest(unittest.TestCase):
    def test_two_ranks_pool_and_staging(self):
        n = 2
        uid = conccl.unique_id()
        procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(r), str(n), uid],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
        outs = []
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=240)
            self.assertEqual(p.returncode, 0, f"rank {r}: {err}")
            outs.append(out.strip())
        self.assertTrue(outs[0].startswith("offsets "), outs[0])
        self.assertEqual(outs[0], outs[1], "the ranks' pool tensors are at different offsets")

    def test_refusals_in_one_process(self):
        import conccl.torch as ct
        with self.assertRaises(conccl.Error) as cm:
            ct.SymmetricPool("comm", 4096)
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIn("conccl.Communicator", cm.exception.message)
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            comm = conccl.Communicator(dev, [0, 1])
            with self.assertRaises(conccl.Error) as cm:
                ct.SymmetricPool(comm, 4096)
            self.assertEqual(cm.exception.status, "invalid_argument")
            self.assertIn("one process per rank", cm.exception.message)
            self.assertIsNone(ct.pool_of(comm))
        self.assertIsInstance(ct.SymmetricPool.last_error(), str)


def _cuda_mempool_reason():
    if torch is None:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no CUDA device here (the MemPool form needs one)"
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch.cuda, "use_mem_pool"):
        return f"torch {torch.__version__} has no torch.cuda.MemPool (PyTorch >= 2.5)"
    try:
        conccl.Device("nv").close()
    except conccl.Error as e:
        return f"no nv backend here: {e}"
    return None


class CudaMemPoolTest(unittest.TestCase):
    """The torch.cuda.MemPool form and the default allocator's staged form, on a GPU."""

    def setUp(self):
        reason = _cuda_mempool_reason()
        if reason:
            self.skipTest(reason)

    def test_example_pool_and_default_allocator(self):
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python",
                               "torch_pool_allgather.py")
        for extra in ([], ["--default-allocator"]):
            p = subprocess.run([sys.executable, example, "2", "5"] + extra, capture_output=True, text=True,
                               timeout=280)
            self.assertEqual(p.returncode, 0, f"{extra}: {p.stdout}\n{p.stderr}")


if __name__ == "__main__":
    unittest.main()
