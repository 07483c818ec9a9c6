"""tests/python/test_conccl.py - the Python package over the C API, on the emulated node.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=python and
CONCCL_LIBRARY=<build>/src/libconccl.so.
"""
import os
import subprocess
import sys
import unittest

import conccl


def run_ranks(test, rank_script, n, uid):
    """Runs rank_script in n Python processes (argv: rank, n, uid) and checks
    that each exits 0 having printed "ok RANK"."""
    procs = [subprocess.Popen([sys.executable, "-c", rank_script, str(r), str(n), uid],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        test.assertEqual(p.returncode, 0, f"rank {r}: {err}")
        test.assertEqual(out.strip(), f"ok {r}")


class DeviceTest(unittest.TestCase):
    def test_unknown_backend_is_an_error_with_the_message(self):
        with self.assertRaises(conccl.Error) as cm:
            conccl.Device("tpu")
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIn("unknown backend 'tpu'", cm.exception.message)

    def test_backend_settings(self):
        with conccl.Device("emu", settings={"preset": "small", "gpus": 3, "engines": 2}) as dev:
            self.assertEqual(dev.gpu_count, 3)
            self.assertEqual(len(dev.engines(0)), 2)
        with conccl.Device("emu", settings="preset=small gpus=2") as dev:
            self.assertEqual(dev.gpu_count, 2)
        with self.assertRaises(conccl.Error) as cm:
            conccl.Device("emu", settings={"gpu": 2})
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIn("backend emu has no setting 'gpu' (its settings: preset, gpus", cm.exception.message)
        with self.assertRaises(conccl.Error) as cm:
            conccl.Device("nv", settings={"interrupt_waits": "sometimes"})
        self.assertIn("interrupt_waits='sometimes': give 0 or 1", cm.exception.message)
        with self.assertRaises(conccl.Error):
            conccl.Device("emu", settings={"preset": "a b"})
        with self.assertRaises(conccl.Error):
            conccl.Device("emu", settings=["gpus=2"])

    def test_emu_keywords_are_the_older_form_of_settings(self):
        # preset=, gpus=, ... (the C API's deprecated fields) shape the node as the settings of those names.
        with conccl.Device("emu", preset="small", gpus=3, engines=2) as dev:
            self.assertEqual(dev.gpu_count, 3)
            self.assertEqual(len(dev.engines(0)), 2)
            self.assertEqual(dev.topology()["preset"], "small(custom)")
        with conccl.Device("emu", gpus=3, settings="preset=small gpus=3") as dev:  # both ways, agreeing
            self.assertEqual(dev.gpu_count, 3)
        with self.assertRaises(conccl.Error) as cm:
            conccl.Device("emu", gpus=4, settings="preset=small gpus=3")
        self.assertIn("gpus is given twice", cm.exception.message)

    def test_topology_and_engines(self):
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            self.assertEqual(dev.gpu_count, 8)
            topo = dev.topology()
            self.assertEqual(topo["backend"], "emu")
            self.assertEqual(len(topo["gpus"]), 8)
            self.assertEqual(len(dev.engines(0)), 16)
            with self.assertRaises(conccl.Error) as cm:
                dev.engines(8)
            self.assertEqual(cm.exception.status, "not_found")
            self.assertEqual([g["node_gpu_id"] for g in topo["gpus"]], list(range(1, 9)))

    def test_visible_gpus_keep_their_node_wide_ids(self):
        # A process isolated to GPUs 6 and 3 of the node (cgroups, Slurm): its
        # indices 0 and 1, their node-wide ids 7 and 4, as every process sees them.
        with conccl.Device("emu", settings="preset=mi300x visible=6,3") as dev:
            self.assertEqual(dev.gpu_count, 2)
            topo = dev.topology()
            self.assertEqual([(g["index"], g["node_gpu_id"]) for g in topo["gpus"]], [(0, 7), (1, 4)])
        with self.assertRaises(conccl.Error) as cm:
            conccl.Device("emu", settings="preset=mi300x visible=8")
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIn("visible", str(cm.exception))

    def test_queue_copy_signal_and_zero_copy_views(self):
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n = 3 * 4096 + 512
            src, dst = dev.alloc(0, n), dev.alloc(1, n)
            data = os.urandom(n)
            src.upload(data)
            self.assertEqual(bytes(src.memoryview()), data, "emulated HBM is CPU-visible: zero-copy view")
            q = conccl.Queue(dev, 0, dev.engines(0)[0])
            done = conccl.Signal(dev)
            q.copy(dst.va, src.va, n)
            q.signal_add(done, 1)
            ticket = q.submit()
            done.wait(1)
            q.wait(ticket)
            self.assertGreaterEqual(q.completed, ticket)
            self.assertEqual(dst.download(), data)
            self.assertEqual(done.value, 1)
            # The view is live: the engine's fill shows through it.
            q.fill(dst.va, 0x01020304, 4096)
            q.submit()
            q.wait()
            self.assertEqual(bytes(dst.memoryview()[:4]), bytes([4, 3, 2, 1]))
            try:
                import numpy  # noqa: F401
            except ImportError:
                pass
            else:
                self.assertEqual(int(dst.numpy("uint32")[0]), 0x01020304)
            # Errors from the engine layer arrive as conccl.Error.
            with self.assertRaises(conccl.Error) as cm:
                conccl.Queue(dev, 0, 999)
            self.assertIn("engine 999", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                dst.download(nbytes=n + 1)
            self.assertEqual(cm.exception.status, "out_of_range")
            # A wait on a signal nobody advances ends at its deadline.
            with self.assertRaises(conccl.Error) as cm:
                done.wait(2, timeout_ms=20)
            self.assertEqual(cm.exception.status, "timeout")
            src.free()
            dst.free()
            with self.assertRaises(conccl.Error) as cm:
                src.free()
            self.assertEqual(cm.exception.status, "not_found")
            with self.assertRaises(conccl.Error) as cm:
                dev.alloc(0, 0)
            self.assertEqual(cm.exception.status, "invalid_argument")
        # Closing the device destroyed the queue and the signal first.
        self.assertIsNone(q._h)
        self.assertIsNone(done._h)


class CollectiveTest(unittest.TestCase):
    def test_all_to_all_broadcast_and_plans(self):
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, chunk = 4, 65536 + 64
            comm = conccl.Communicator(dev, range(n))
            self.assertEqual(comm.size, n)
            data = [os.urandom(chunk * n) for _ in range(n)]
            send = [dev.alloc(r, chunk * n) for r in range(n)]
            recv = [dev.alloc(r, chunk * n) for r in range(n)]
            for r in range(n):
                send[r].upload(data[r])
            comm.all_to_all(send, recv, chunk)
            for r in range(n):
                got = recv[r].download()
                for s in range(n):
                    self.assertEqual(got[s * chunk:(s + 1) * chunk], data[s][r * chunk:(r + 1) * chunk])
            self.assertEqual(comm.cached_plans, 1)
            comm.broadcast(send[2], recv, chunk, root=2)
            for r in range(n):
                self.assertEqual(recv[r].download(chunk), data[2][:chunk])
            self.assertEqual(comm.cached_plans, 2)
            plan = comm.plan("all_gather", chunk, send, recv, variant="b2b", prelaunch=True)
            self.assertEqual(plan.variant, "b2b")
            plan.prelaunch()
            plan.release()
            plan.wait()
            addr, value = plan.completion(1)
            self.assertEqual(value, n)
            self.assertNotEqual(addr, 0)
            for r in range(n):
                self.assertEqual(recv[r].download(), b"".join(d[:chunk] for d in data))
            with self.assertRaises(conccl.Error) as cm:
                plan.completion(n)
            self.assertEqual(cm.exception.status, "out_of_range")
            with self.assertRaises(conccl.Error) as cm:
                comm.plan("all_gather", 0, send, recv)
            self.assertEqual(cm.exception.status, "invalid_argument")


    def test_windows_one_process_per_rank(self):
        # Calls through windows: views at the same offsets on every rank, no
        # bootstrap message per call, every byte checked; stats, async_error,
        # and the window's and views' misuse.
        uid = conccl.unique_id()
        rank_script = '''
import hashlib, sys, conccl
r, n, uid, chunk = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], 5000
data = lambda s: (hashlib.sha256(bytes([s % 256])).digest() * (chunk // 32 + 1))[:chunk]
with conccl.Device("emu", settings="preset=mi300x", process_slot=r) as dev:
    comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=r, timeout_ms=20000)
    mem = dev.alloc(r, 4 * chunk * n)
    with comm.register_window(mem) as win:
        send, recv = win.view(0, chunk * n), win.view(2 * chunk * n, chunk * n)
        before = comm.stats()
        assert before["bootstrap_messages_sent"] > 0, before
        for k in range(6):
            send.upload(b"".join(data(7 * k + r) for _ in range(n)))
            comm.all_gather(send, recv, chunk)
            got = recv.download()
            for s in range(n):
                assert got[s * chunk:(s + 1) * chunk] == data(7 * k + s), (k, s)
        # Every rank passes the root's buffer's place (NCCL's symmetric rule).
        comm.broadcast(send, recv, chunk, root=0)
        assert recv.download()[:chunk] == data(35), "broadcast"
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            # Tensors over the window (torch.from_dlpack): the torch shapes, same path.
            heap = torch.from_dlpack(mem)
            inp = heap[chunk * n:chunk * n + 4096]
            out = heap[3 * chunk * n:3 * chunk * n + 4096 * n]
            inp.copy_(torch.arange(4096, dtype=torch.int64).to(torch.uint8) ^ (r + 1))
            comm.all_gather_into_tensor(out, inp)
            for s in range(n):
                want = torch.arange(4096, dtype=torch.int64).to(torch.uint8) ^ (s + 1)
                assert torch.equal(out[s * 4096:(s + 1) * 4096], want), s
            del heap, inp, out
        # An all-to-all through the same views.
        send.upload(b"".join(data(40 + 2 * r + q) for q in range(n)))
        comm.all_to_all(send, recv, chunk)
        got = recv.download()
        for s in range(n):
            assert got[s * chunk:(s + 1) * chunk] == data(40 + 2 * s + r), ("all_to_all", s)
        after = comm.stats()
        assert sorted(after) == sorted(["bootstrap_messages_sent", "bootstrap_messages_received", "calls",
                                        "window_calls", "window_plans"]), after
        assert after["bootstrap_messages_sent"] == before["bootstrap_messages_sent"], (before, after)
        assert after["bootstrap_messages_received"] == before["bootstrap_messages_received"], (before, after)
        assert after["window_calls"] - before["window_calls"] >= 8, (before, after)
        assert after["calls"] - before["calls"] == after["window_calls"] - before["window_calls"], (before, after)
        assert comm.async_error() is None
        assert win.registered and "registered" in repr(win), repr(win)
        try:
            comm.register_window(b"not a buffer")
            raise AssertionError("bytes registered")
        except conccl.Error as e:
            assert e.status == "invalid_argument" and "conccl.Buffer" in e.message, e
        try:
            send.free()
            raise AssertionError("a view was freed")
        except conccl.Error as e:
            assert e.status == "invalid_argument" and "view" in e.message, e
        try:
            mem.view(4 * chunk * n, 1)
            raise AssertionError("a view past the end")
        except conccl.Error as e:
            assert e.status == "out_of_range", e
    try:
        win.view(0, 16)
        raise AssertionError("a view of a closed window")
    except conccl.Error as e:
        assert "deregistered" in e.message, e
    assert not win.registered
    win.close()  # again: nothing to do
    win.deregister()
    mem.free()
    try:
        send.download()
        raise AssertionError("a view outlived its buffer")
    except conccl.Error as e:
        assert e.status in ("not_found", "invalid_argument"), e
    # A window left registered dies with its communicator (the device's close).
    win2 = comm.register_window(dev.alloc(r, 4096))
    assert win2.registered
assert not win2.registered and "closed" in repr(win2), repr(win2)
try:
    win2.view(0, 16)
    raise AssertionError("a view of a window whose communicator is gone")
except conccl.Error as e:
    assert "communicator" in e.message, e
win2.close()  # its communicator took it: nothing to do
print("ok", r)
'''
        n = 2
        run_ranks(self, rank_script, n, uid)

    def test_windows_need_one_process_per_rank(self):
        # A communicator of every rank in one process: no windows, no
        # bootstrap, no asynchronous error.
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            comm = conccl.Communicator(dev, range(2))
            with self.assertRaises(conccl.Error) as cm:
                comm.register_window(dev.alloc(0, 4096))
            self.assertEqual(cm.exception.status, "invalid_argument")
            self.assertIn("separate processes", cm.exception.message)
            st = comm.stats()
            self.assertEqual(st["bootstrap_messages_sent"], 0)
            self.assertEqual(st["bootstrap_messages_received"], 0)
            self.assertIsNone(comm.async_error())

    def test_one_process_per_rank(self):
        # Each rank a Python process of its own, as torch.distributed runs:
        # the id made here, handed over on the command line.
        uid = conccl.unique_id()
        self.assertTrue(uid.startswith("conccl-uid-"))
        rank_script = '''
import hashlib, sys, conccl
r, n, uid, chunk = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], 70000
data = lambda s: hashlib.sha256(bytes([s])).digest() * (chunk // 32) + bytes(chunk % 32)
with conccl.Device("emu", settings="preset=mi300x", process_slot=r) as dev:
    comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=r, timeout_ms=20000)
    assert comm.rank == r and comm.size == n
    send, recv = dev.alloc(r, chunk * n), dev.alloc(r, chunk * n)
    send.upload(b"".join(data(r * n + d) for d in range(n)))
    plan = comm.plan("all_to_all", chunk, [send], [recv])
    for _ in range(2):
        plan.launch()
        plan.wait()
    got = recv.download()
    for s in range(n):
        assert got[s * chunk:(s + 1) * chunk] == data(s * n + r), s
    # The NCCL-shaped calls: this rank's buffers alone (a list of one, or the
    # buffer itself); broadcast's send only on the root.
    other = dev.alloc(r, chunk * n)
    for k, into in enumerate([recv, [recv], other if r == 1 else recv]):
        send.upload(b"".join(data(50 + 10 * k + r) for _ in range(n)))
        comm.all_gather(send, into, chunk)
        got = (into[0] if isinstance(into, list) else into).download()
        for s in range(n):
            assert got[s * chunk:(s + 1) * chunk] == data(50 + 10 * k + s), (k, s)
    send.upload(b"".join(data(90 + r * n + d) for d in range(n)))
    comm.all_to_all([send], [recv], chunk)
    got = recv.download()
    for s in range(n):
        assert got[s * chunk:(s + 1) * chunk] == data(90 + s * n + r), s
    comm.broadcast(send if r == 1 else None, other, chunk, root=1)
    assert other.download()[:chunk] == data(90 + n), "broadcast"
    try:
        comm.all_gather([send, send], [recv, recv], chunk)
        raise AssertionError("two buffers per rank were accepted")
    except conccl.Error as e:
        assert e.status == "invalid_argument", e
print("ok", r)
'''
        n = 3
        run_ranks(self, rank_script, n, uid)
        with conccl.Device("emu") as dev:
            with self.assertRaises(conccl.Error) as cm:
                conccl.Communicator(dev, rank=0, nranks=2, unique_id="nope")
            self.assertEqual(cm.exception.status, "invalid_argument")

    def test_per_engine_queues_and_release_by_stores(self):
        # Another writer releases a prelaunched plan with the stores it names:
        # here an engine (a queue's dword fills), as a compute stream would.
        with conccl.Device("emu", settings="preset=h200") as dev:
            n, chunk = 3, 40960 + 8
            comm = conccl.Communicator(dev, [0] * n, loopback=True, queues="per_engine")
            data = [os.urandom(chunk) for _ in range(n)]
            send = [dev.alloc(0, chunk) for _ in range(n)]
            recv = [dev.alloc(0, chunk * n) for _ in range(n)]
            for r in range(n):
                send[r].upload(data[r])
            plan = comm.plan("all_gather", chunk, send, recv, variant="pcpy", prelaunch=True)
            plan.prelaunch()
            stores = plan.release_by_stores()
            self.assertEqual(len(stores), 1, "Hopper signals: one native 64-bit store")
            self.assertEqual(stores[0][1], 1)
            with self.assertRaises(conccl.Error) as cm:
                plan.wait(timeout_ms=50)
            self.assertEqual(cm.exception.status, "timeout")
            q = conccl.Queue(dev, 0, dev.engines(0)[0])
            for address, value in stores + [plan.consumed_store()]:
                q.fill(address, value & 0xFFFFFFFF, 4)
                q.fill(address + 4, value >> 32, 4)
            q.submit()
            plan.wait()
            for r in range(n):
                self.assertEqual(recv[r].download(), b"".join(data))

    def test_cuda_calls_need_the_nv_backend(self):
        with conccl.Device("emu", settings="preset=h200") as dev:
            with self.assertRaises(conccl.Error) as cm:
                dev.alloc_cuda(0, 4096)
            self.assertEqual(cm.exception.status, "unavailable")
            self.assertIn("nv backend", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                dev.alloc(0, 4096, conccl.CUDA)  # the same, by kind
            self.assertEqual(cm.exception.status, "unavailable")
            comm = conccl.Communicator(dev, [0, 0], loopback=True)
            with self.assertRaises(conccl.Error) as cm:
                comm.all_gather_into_tensor([b"x", b"y"], [b"x", b"y"])
            self.assertEqual(cm.exception.status, "invalid_argument")
            self.assertIn("must be a torch tensor, not bytes", cm.exception.message)
            send = [dev.alloc(0, 4096) for _ in range(2)]
            recv = [dev.alloc(0, 8192) for _ in range(2)]
            plan = comm.plan("all_gather", 4096, send, recv, prelaunch=True)
            with self.assertRaises(conccl.Error) as cm:
                plan.enqueue_on_stream(conccl.CU_STREAM_LEGACY)
            self.assertEqual(cm.exception.status, "unavailable")



class NamesTest(unittest.TestCase):
    """The package's numbers are the library's: its names come from the C++
    tables (the C enums are checked against them when the library builds)."""

    def test_ops_and_variants_come_from_the_library(self):
        self.assertEqual(conccl.OPS["allgather"], 4)
        self.assertEqual(conccl.OPS["all_gather"], 4)
        self.assertEqual(conccl.OPS["all_to_all"], conccl.OPS["alltoall"])
        self.assertEqual(sorted(n for n in conccl.OPS if "_" not in n),
                         ["allgather", "alltoall", "broadcast", "gather", "p2p", "scatter"])
        self.assertEqual(conccl.VARIANTS, {"auto": 0, "pcpy": 1, "bcst": 2, "b2b": 3, "swap": 4, "fanout": 5,
                                           "chain": 6, "striped": 7, "single": 8, "pull": 9})
        self.assertEqual(conccl._op_name(99), b"?")
        self.assertEqual(conccl._variant_name(-1), b"?")

    def test_dtype_and_redop_numbers_name_what_the_library_names(self):
        for member in conccl.DataType:
            name = conccl._datatype_name(int(member)).decode()
            self.assertIn(name, conccl.DTYPES, member)
            self.assertEqual(conccl.DTYPES[name], member)
        for member in conccl.RedOp:
            name = conccl._redop_name(int(member)).decode()
            self.assertEqual(conccl.REDOPS[name], member)
        # every number the library names is one of ours
        self.assertEqual(set(conccl._library_names(conccl._datatype_name).values()), {int(m) for m in conccl.DataType})
        self.assertEqual(set(conccl._library_names(conccl._redop_name).values()), {int(m) for m in conccl.RedOp})


class ArgumentTest(unittest.TestCase):
    """Every argument is checked before it reaches ctypes, which would drop an
    integer's high bits and fail inside its own internals on a wrong type."""

    def assert_error(self, status, words, fn, *args, **kw):
        with self.assertRaises(conccl.Error) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.status, status, cm.exception.message)
        for w in words:
            self.assertIn(w, cm.exception.message)
        return cm.exception

    def test_integers_outside_their_c_type_are_refused(self):
        int_range, u32_range, u64_range = "-2147483648..2147483647", "0..4294967295", "0..18446744073709551615"
        # ctypes would open 2 GPUs here (2**32 + 2 wraps to 2).
        self.assert_error("out_of_range", ["gpus", str(2**32 + 2), int_range], conccl.Device, "emu", gpus=2**32 + 2)
        self.assert_error("out_of_range", ["process_slot", int_range], conccl.Device, "emu", process_slot=-2**31 - 1)
        self.assert_error("out_of_range", ["memory_per_gpu", "-1"], conccl.Device, "emu", memory_per_gpu=-1)
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, chunk = 4, 4096 + 8
            comm = conccl.Communicator(dev, range(n))
            send = [dev.alloc(r, chunk) for r in range(n)]
            recv = [dev.alloc(r, chunk * n) for r in range(n)]
            data = os.urandom(chunk)
            send[0].upload(data)
            # ctypes would broadcast from root 0 here.
            self.assert_error("out_of_range", ["root", str(2**32), int_range], comm.broadcast, send[0], recv, chunk,
                              root=2**32)
            self.assert_error("out_of_range", ["nbytes", "-1"], comm.all_gather, send, recv, -1)
            self.assert_error("out_of_range", ["nbytes", str(2**64)], comm.all_to_all, send, recv, 2**64)
            sig = conccl.Signal(dev)
            # ctypes would wait 50 ms here.
            self.assert_error("out_of_range", ["timeout_ms", str(2**32 + 50), u32_range], sig.wait, 1,
                              timeout_ms=2**32 + 50)
            self.assert_error("out_of_range", ["value", u64_range], sig.wait, -1)
            self.assert_error("out_of_range", ["delta", u64_range], sig.add, 2**64)
            self.assert_error("out_of_range", ["initial", u64_range], conccl.Signal, dev, -5)
            q = conccl.Queue(dev, 0, dev.engines(0)[0])
            self.assert_error("out_of_range", ["nbytes", "-1", u64_range], q.copy, recv[0].va, send[0].va, -1)
            self.assert_error("out_of_range", ["dst", u64_range], q.copy, -recv[0].va, send[0].va, chunk)
            self.assert_error("out_of_range", ["value", u32_range], q.fill, recv[0].va, 2**32, 4)
            self.assert_error("out_of_range", ["timeout_ms", u32_range], q.submit, timeout_ms=-1)
            self.assert_error("out_of_range", ["ticket", u64_range], q.wait, 2**64)
            self.assert_error("out_of_range", ["gpu", int_range], dev.alloc, 2**32, 4096)
            self.assert_error("out_of_range", ["nbytes"], dev.alloc, 0, -4096)
            self.assert_error("out_of_range", ["gpu", int_range], dev.engines, 2**32)
            self.assert_error("out_of_range", ["offset"], send[0].download, 16, offset=-1)
            self.assert_error("out_of_range", ["nbytes"], send[0].download, -16)
            self.assert_error("out_of_range", ["gpus[1]", int_range], conccl.Communicator, dev, [0, 2**32 + 1])
            self.assert_error("out_of_range", ["engines[0]", int_range], conccl.Communicator, dev, [0, 1],
                              engines=[2**31])
            self.assert_error("out_of_range", ["timeout_ms", u32_range], conccl.Communicator, dev, [0, 1],
                              timeout_ms=2**32)
            self.assert_error("out_of_range", ["root", int_range], comm.plan, "broadcast", chunk, [send[0]], recv,
                              root=2**32 + 1)
            self.assert_error("out_of_range", ["peer", int_range], comm.plan, "p2p", chunk, [send[0]], recv,
                              peer=-2**31 - 1)
            plan = comm.plan("all_gather", chunk, send, recv)
            self.assert_error("out_of_range", ["timeout_ms", u32_range], plan.launch, timeout_ms=2**32 + 10000)
            self.assert_error("out_of_range", ["rank", int_range], plan.completion, 2**32 + 1)
            # The ends of each range still go through.
            sig.add(2**64 - 2)
            self.assertEqual(sig.value, 2**64 - 2)
            sig.wait(2**64 - 2, timeout_ms=2**32 - 1)
            self.assertEqual(conccl.Signal(dev, 2**64 - 1).value, 2**64 - 1)
            comm.broadcast(send[0], recv, chunk, root=0)
            self.assertEqual(recv[3].download(chunk), data)

    def test_wrong_types_name_the_argument(self):
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, chunk = 2, 4096
            comm = conccl.Communicator(dev, range(n))
            send = [dev.alloc(r, chunk) for r in range(n)]
            recv = [dev.alloc(r, chunk * n) for r in range(n)]
            sig = conccl.Signal(dev)
            q = conccl.Queue(dev, 0, dev.engines(0)[0])
            bad = "invalid_argument"
            self.assert_error(bad, ["send[1]", "conccl.Buffer", "str"], comm.all_gather, [send[0], "x"], recv, chunk)
            self.assert_error(bad, ["recv[0]", "conccl.Buffer", "NoneType"], comm.all_to_all, send, [None, recv[1]],
                              chunk)
            self.assert_error(bad, ["root_send", "conccl.Buffer", "bytes"], comm.broadcast, b"abc", recv, chunk)
            self.assert_error(bad, ["send[0]", "conccl.Buffer", "int"], comm.plan, "all_gather", chunk, [7, 8], recv)
            self.assert_error(bad, ["send", "list of conccl.Buffer"], comm.plan, "all_gather", chunk, 7, recv)
            self.assert_error(bad, ["data", "bytes-like", "float"], send[0].upload, 1.5)
            self.assert_error(bad, ["signal", "conccl.Signal", "NoneType"], q.signal_add, None)
            self.assert_error(bad, ["signal", "conccl.Signal", "Buffer"], q.wait_ge, send[0], 1)
            self.assert_error(bad, ["nbytes", "integer", "float"], q.copy, recv[0].va, send[0].va, 4096.0)
            self.assert_error(bad, ["dst", "integer", "str"], q.copy, "0x1000", send[0].va, 16)
            self.assert_error(bad, ["timeout_ms", "integer", "float"], sig.wait, 0, timeout_ms=1.5)
            self.assert_error(bad, ["gpus", "integer", "float"], conccl.Device, "emu", gpus=2.0)
            self.assert_error(bad, ["backend", "str", "int"], conccl.Device, 3)
            self.assert_error(bad, ["preset", "str", "bytes"], conccl.Device, "emu", preset=b"mi300x")
            self.assert_error(bad, ["gpus", "integers"], conccl.Communicator, dev, 3)
            self.assert_error(bad, ["gpus[0]", "integer", "str"], conccl.Communicator, dev, ["0", "1"])
            self.assert_error(bad, ["op", "all_gather"], comm.plan, ["all_gather"], chunk, send, recv)
            self.assert_error(bad, ["device", "conccl.Device", "str"], conccl.Signal, "emu")
            self.assert_error(bad, ["device", "conccl.Device"], conccl.Queue, None, 0, 0)
            # A buffer or signal of another device.
            with conccl.Device("emu", settings="preset=mi300x") as other:
                theirs = other.alloc(0, chunk)
                self.assert_error(bad, ["send[0]", "another device"], comm.all_gather, [theirs, send[1]], recv, chunk)
                self.assert_error(bad, ["signal", "another device"], q.signal_add, conccl.Signal(other))
            # The NCCL-shaped calls read one buffer per rank: fewer is refused, not read past.
            self.assert_error(bad, ["send", "2 ranks", "1"], comm.all_gather, send[:1], recv, chunk)
            self.assert_error(bad, ["recv", "2 ranks", "3"], comm.broadcast, send[0], recv + recv[:1], chunk)

    def test_memoryview_is_plain_bytes(self):
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n = 4096 + 100
            buf = dev.alloc(2, n)
            data = os.urandom(n)
            buf.upload(data)
            mv = buf.memoryview()
            self.assertEqual(mv.format, "B")
            self.assertEqual((mv.itemsize, mv.nbytes, mv.readonly), (1, n, False))
            self.assertEqual(mv[7], data[7])
            self.assertEqual(mv[-1], data[-1])
            self.assertEqual(bytes(mv[100:200]), data[100:200])
            patch = os.urandom(64)
            mv[300:364] = patch
            mv[5] = data[5] ^ 0xFF
            want = bytearray(data)
            want[300:364] = patch
            want[5] = data[5] ^ 0xFF
            self.assertEqual(buf.download(), bytes(want), "writes through the view land in the buffer")


class CloseTest(unittest.TestCase):
    def test_everything_made_from_a_closed_device_refuses_use(self):
        dev = conccl.Device("emu", settings="preset=mi300x")
        n, chunk = 2, 8192
        comm = conccl.Communicator(dev, range(n))
        send = [dev.alloc(r, chunk) for r in range(n)]
        recv = [dev.alloc(r, chunk * n) for r in range(n)]
        for b in send:
            b.upload(os.urandom(chunk))
        plan = comm.plan("all_gather", chunk, send, recv)
        sig = conccl.Signal(dev, 3)
        q = conccl.Queue(dev, 1, dev.engines(1)[0])
        early_view = recv[0].memoryview()
        dev.close()
        uses = {
            "buffer": [recv[0].memoryview, recv[0].numpy, recv[0].download, lambda: recv[0].upload(b"ab"),
                       recv[0].free, recv[0].__dlpack__, lambda: recv[0].va, lambda: recv[0].size],
            "signal": [lambda: sig.value, sig.add, lambda: sig.wait(1), lambda: sig.address],
            "queue": [lambda: q.copy(0x1000, 0x2000, 16), q.submit, q.wait, lambda: q.completed],
            "communicator": [lambda: comm.size, lambda: comm.all_gather(send, recv, chunk),
                             lambda: comm.plan("all_gather", chunk, send, recv)],
            "plan": [plan.launch, plan.wait, lambda: plan.variant, lambda: plan.completion(0)],
            "device": [lambda: dev.gpu_count, lambda: dev.alloc(0, 64), dev.topology, lambda: conccl.Signal(dev)],
        }
        for what, calls in uses.items():
            for i, call in enumerate(calls):
                with self.assertRaises(conccl.Error, msg=f"{what} call {i}") as cm:
                    call()
                self.assertEqual(cm.exception.status, "invalid_argument")
                self.assertIn("the device was closed", cm.exception.message, f"{what} call {i}")
        # A view taken before the close is released, not left over unmapped memory.
        with self.assertRaises(ValueError):
            early_view[0]
        dev.close()  # again: nothing left to do

    def test_destroy_close_and_add_statuses_are_checked(self):
        # Since the C API's version 2 these calls return a status. A handle
        # destroyed behind the package's back (through the raw C call) makes
        # each of them fail, and the failure reaches Python.
        dev = conccl.Device("emu", settings="preset=mi300x")
        sig = conccl.Signal(dev, 5)
        self.assertEqual(conccl._sig_destroy(sig._h), 0)
        with self.assertRaises(conccl.Error) as cm:
            sig.add(1)
        self.assertEqual(cm.exception.status, "invalid_argument")
        q = conccl.Queue(dev, 0, dev.engines(0)[0])
        self.assertEqual(conccl._q_destroy(q._h), 0)
        with self.assertRaises(conccl.Error) as cm:
            dev.close()  # closes everything, then reports the first failure: the queue's
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIsNone(dev._h)
        with self.assertRaises(conccl.Error) as cm:
            dev.gpu_count
        self.assertIn("the device was closed", cm.exception.message)

class DLPackTest(unittest.TestCase):
    def test_numpy_from_dlpack_is_a_zero_copy_view(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        if not hasattr(np, "from_dlpack"):
            self.skipTest("this numpy has no from_dlpack")
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n = 8192 + 24
            buf = dev.alloc(1, n)
            data = os.urandom(n)
            buf.upload(data)
            self.assertEqual(buf.__dlpack_device__(), (1, 0))
            self.assertIsNone(buf.cuda_ptr)  # not CUDA memory
            a = np.from_dlpack(buf)
            self.assertEqual(a.dtype, np.uint8)
            self.assertEqual(a.shape, (n,))
            self.assertEqual(a.tobytes(), data)
            buf.upload(bytes(range(16)))  # a view, not a copy: new bytes show through
            self.assertEqual(a[:16].tobytes(), bytes(range(16)))
            del a
            # An unconsumed capsule frees its tensor when it dies.
            before = len(conccl._dl_alive)
            cap = buf.__dlpack__()
            self.assertEqual(len(conccl._dl_alive), before + 1)
            del cap
            self.assertEqual(len(conccl._dl_alive), before)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


class TorchShapesTest(unittest.TestCase):
    """The tensor calls take torch.distributed's shapes. On the emulated node the
    tensors are CPU tensors viewing the device's buffers (torch.from_dlpack)."""

    def setUp(self):
        self.torch = _torch()
        if self.torch is None:
            self.skipTest("PyTorch is not installed (Debian: apt-get install python3-torch)")

    def tensor(self, dev, gpu, shape, dtype):
        """A tensor over a new buffer of `gpu`, filled with random bytes."""
        torch = self.torch
        nbytes = torch.empty(shape, dtype=dtype).numel() * torch.empty(0, dtype=dtype).element_size()
        buf = dev.alloc(gpu, nbytes)
        buf.upload(os.urandom(nbytes))
        return torch.from_dlpack(buf).view(dtype).view(shape)

    def test_all_to_all_single_equal_sizes(self):
        torch = self.torch
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, k, m = 4, 3, 1111  # chunk r: rows [r*k, (r+1)*k) of an (n*k, m) int32 tensor
            comm = conccl.Communicator(dev, range(n))
            inputs = [self.tensor(dev, r, (n * k, m), torch.int32) for r in range(n)]
            outputs = [self.tensor(dev, r, (n * k, m), torch.int32) for r in range(n)]
            sent = [t.clone() for t in inputs]
            comm.all_to_all_single(outputs, inputs)
            for d in range(n):
                for s in range(n):
                    self.assertTrue(torch.equal(outputs[d][s * k:(s + 1) * k], sent[s][d * k:(d + 1) * k]),
                                    f"rank {d}'s chunk {s} is rank {s}'s input chunk {d}")
            for t, want in zip(inputs, sent):
                self.assertTrue(torch.equal(t, want), "the input is not written")
            # Equal split sizes are what torch.distributed takes too.
            for t in inputs:
                t.copy_(torch.randint(-2**31, 2**31 - 1, t.shape, dtype=torch.int32))
            comm.all_to_all_single(outputs, inputs, [k] * n, [k] * n)
            self.assertTrue(torch.equal(outputs[2][k:2 * k], inputs[1][2 * k:3 * k]))
            with self.assertRaises(conccl.Error) as cm:
                comm.all_to_all_single(outputs, inputs, [k + 1, k - 1] + [k] * (n - 2))
            self.assertIn("only equal splits", cm.exception.message)
            # An output n times the input (what all_gather_into_tensor takes) is refused, naming the rule.
            big = [self.tensor(dev, r, (n * n * k, m), torch.int32) for r in range(n)]
            with self.assertRaises(conccl.Error) as cm:
                comm.all_to_all_single(big, inputs)
            self.assertIn("must be the same as input's", cm.exception.message)
            odd = [self.tensor(dev, r, (n * k + 1, m), torch.int32) for r in range(n)]
            with self.assertRaises(conccl.Error) as cm:
                comm.all_to_all_single(odd, odd)
            self.assertIn(f"dim 0 ({n * k + 1}) does not split into {n}", cm.exception.message)

    def test_all_gather_into_tensor_output_is_world_size_times_input(self):
        torch = self.torch
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, shape = 3, (5, 777)
            comm = conccl.Communicator(dev, range(n))
            inputs = [self.tensor(dev, r, shape, torch.float16) for r in range(n)]
            # Concatenated (n*5, 777) outputs, and a stacked (n, 5, 777) one, as torch takes both.
            outputs = [self.tensor(dev, r, (n * shape[0], shape[1]), torch.float16) for r in range(n - 1)]
            outputs.append(self.tensor(dev, n - 1, (n,) + shape, torch.float16))
            comm.all_gather_into_tensor(outputs, inputs)
            want = torch.cat(inputs).view(torch.int16)  # bitwise: random halves include NaNs
            for r in range(n):
                self.assertTrue(torch.equal(outputs[r].reshape(-1, shape[1]).view(torch.int16), want), f"rank {r}")
            # An input that is a slice of a larger buffer's tensor (a part of the allocation).
            whole = self.tensor(dev, 1, (3 * shape[0], shape[1]), torch.float16)
            part = whole[shape[0]:2 * shape[0]]
            comm.all_gather_into_tensor(outputs, [inputs[0], part, inputs[2]])
            self.assertTrue(torch.equal(outputs[0][shape[0]:2 * shape[0]].view(torch.int16), part.view(torch.int16)))
            with self.assertRaises(conccl.Error) as cm:
                comm.all_gather_into_tensor(inputs, inputs)
            self.assertIn(f"must be world size ({n}) times input_tensor's", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                comm.all_gather_into_tensor([o.view(torch.int16) for o in outputs], inputs)
            self.assertIn("same dtype", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:  # memory the emulated engines cannot reach
                comm.all_gather_into_tensor(outputs, [torch.ones(shape, dtype=torch.float16)] * n)
            self.assertIn("torch.from_dlpack(device.alloc(gpu, nbytes))", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                comm.all_gather_into_tensor(outputs[0], inputs[0])
            self.assertIn("one per rank", cm.exception.message)

    def test_tensors_found_again_after_their_buffer_goes(self):
        """A tensor's buffer is looked up once and remembered (a program holds many
        buffers, and a scan of all of them per tensor per call grew with it): what is
        remembered must not outlive the buffer, nor hide a new one at the same place."""
        torch = self.torch
        with conccl.Device("emu", settings="preset=small") as dev:
            n, nbytes = 2, 4096
            comm = conccl.Communicator(dev, [0, 1])
            others = [dev.alloc(0, 8192) for _ in range(300)]  # a program's other buffers
            inputs = [self.tensor(dev, r, (nbytes,), torch.uint8) for r in range(n)]
            outputs = [self.tensor(dev, r, (n * nbytes,), torch.uint8) for r in range(n)]
            for _ in range(3):  # found, then remembered: every call right
                for t in inputs:
                    t.copy_(torch.randint(0, 256, (nbytes,), dtype=torch.uint8))
                comm.all_gather_into_tensor(outputs, inputs)
                for r in range(n):
                    self.assertTrue(torch.equal(outputs[r], torch.cat(inputs)), f"rank {r}")
            # The input's buffer freed: the tensor is refused, not sent from freed memory.
            buf = dev.alloc(1, nbytes)
            t = torch.from_dlpack(buf).view(torch.uint8)
            comm.all_gather_into_tensor(outputs, [inputs[0], t])
            buf.free()
            with self.assertRaises(conccl.Error) as cm:
                comm.all_gather_into_tensor(outputs, [inputs[0], t])
            self.assertIn("not a buffer of this device", cm.exception.message)
            # A buffer that goes with the device: refused after the device closes too.
            del others
        with self.assertRaises(conccl.Error):
            comm.all_gather_into_tensor(outputs, inputs)

    def test_broadcast_tensor_src(self):
        torch = self.torch
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, shape = 4, (7, 333)
            comm = conccl.Communicator(dev, range(n))
            tensors = [self.tensor(dev, r, shape, torch.int32) for r in range(n)]
            root = [t.clone() for t in tensors][2]
            comm.broadcast(tensors, 2)  # torch.distributed.broadcast(tensor, src): in place on every rank
            for r in range(n):
                self.assertTrue(torch.equal(tensors[r], root), f"rank {r}")
            tensors[1].copy_(torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32))
            comm.broadcast(tensors, src=1)
            self.assertTrue(torch.equal(tensors[3], tensors[1]))
            with self.assertRaises(conccl.Error) as cm:
                comm.broadcast(tensors, n)
            self.assertIn("src", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                comm.broadcast(tensors[:2] + [self.tensor(dev, r, (8, 333), torch.int32) for r in (2, 3)], 0)
            self.assertIn("same bytes", cm.exception.message)

    def test_host_ordered_tensor_calls(self):
        # stream=conccl.HOST: ordered on the host (returns with the data in place), and
        # nothing staged: tensors the engines cannot reach as they are are refused.
        torch = self.torch
        with conccl.Device("emu", settings="preset=small") as dev:
            comm = conccl.Communicator(dev, range(2))
            tensors = [self.tensor(dev, r, (5, 77), torch.int32) for r in range(2)]
            comm.broadcast(tensors, 1, stream=conccl.HOST)
            self.assertTrue(torch.equal(tensors[0], tensors[1]))
            with self.assertRaises(conccl.Error) as cm:
                comm.broadcast([torch.ones(4), torch.ones(4)], 0, stream=conccl.HOST)
            self.assertIn("not a buffer of this device", cm.exception.message)
            self.assertEqual(repr(conccl.HOST), "conccl.HOST")

    def test_gather_and_scatter_tensors(self):
        # torch.distributed.gather(tensor, gather_list, dst) / scatter(tensor, scatter_list, src):
        # a list of one tensor per rank on the root (back to back, or anywhere), or one tensor.
        torch = self.torch
        with conccl.Device("emu", settings="preset=mi300x") as dev:
            n, shape = 4, (3, 257)
            comm = conccl.Communicator(dev, range(n))
            inputs = [self.tensor(dev, r, shape, torch.int32) for r in range(n)]
            sent = [t.clone() for t in inputs]
            # Back to back: chunks of one device buffer, written in place.
            whole = self.tensor(dev, 2, (n * shape[0], shape[1]), torch.int32)
            comm.gather(inputs, list(whole.chunk(n)), 2)
            self.assertTrue(torch.equal(whole, torch.cat(sent)), "gather into chunks")
            # Anywhere: plain CPU tensors, through a staging buffer; random before, so a
            # tensor left alone would show.
            loose = [torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32) for _ in range(n)]
            comm.gather(inputs, loose, dst=1)
            for r in range(n):
                self.assertTrue(torch.equal(loose[r], sent[r]), f"gather_list[{r}]")
            # One tensor of n times the elements.
            flat = self.tensor(dev, 0, (n,) + shape, torch.int32)
            comm.gather(inputs, flat, 0)
            self.assertTrue(torch.equal(flat, torch.stack(sent)))
            # Scatter: every rank's output gets its part of the root's list or tensor.
            outputs = [self.tensor(dev, r, shape, torch.int32) for r in range(n)]
            parts = [torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32) for _ in range(n)]
            comm.scatter(outputs, parts, src=3)
            for r in range(n):
                self.assertTrue(torch.equal(outputs[r], parts[r]), f"scatter to rank {r}")
            src = self.tensor(dev, 1, (n * shape[0], shape[1]), torch.int32)
            comm.scatter(outputs, list(src.chunk(n)), 1)
            for r in range(n):
                self.assertTrue(torch.equal(outputs[r], src[r * shape[0]:(r + 1) * shape[0]]), f"rank {r}")
            for t, want in zip(inputs, sent):
                self.assertTrue(torch.equal(t, want), "gather's inputs are not written")
            # Errors name the argument and the rule.
            with self.assertRaises(conccl.Error) as cm:
                comm.gather(inputs, loose[:3], 0)
            self.assertIn("one tensor per rank (4)", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                comm.gather(inputs, None, 0)
            self.assertIn("gives gather_list", cm.exception.message)
            with self.assertRaises(conccl.Error) as cm:
                comm.scatter(outputs, parts, src=n)
            self.assertIn("src 4", cm.exception.message)
            with self.assertRaises(RuntimeError):  # what torch.distributed's callers catch
                comm.scatter(outputs, parts, src=-1)
            with self.assertRaises(conccl.Error) as cm:
                comm.gather(inputs, [p.to(torch.float32) for p in loose], 0)
            self.assertIn("gather_list[0] is torch.float32", cm.exception.message)
            small = self.tensor(dev, 0, (n * shape[0] - 1, shape[1]), torch.int32)
            with self.assertRaises(conccl.Error) as cm:
                comm.gather(inputs, small, 0)
            self.assertIn("world size (4) times", cm.exception.message)

    def test_one_process_per_rank_takes_this_ranks_tensors(self):
        # As torch.distributed: each process gives its own output and input tensor.
        rank_script = """
import sys, torch, conccl
r, n, uid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
k, m = 2, 999
def tensor(dev, shape, seed):
    buf = dev.alloc(r, torch.empty(shape, dtype=torch.int64).numel() * 8)
    t = torch.from_dlpack(buf).view(torch.int64).view(shape)
    t.copy_(torch.randint(-2**62, 2**62, shape, dtype=torch.int64, generator=torch.Generator().manual_seed(seed)))
    return t
with conccl.Device("emu", settings="preset=mi300x", process_slot=r) as dev:
    comm = conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=r, timeout_ms=20000)
    inp, out = tensor(dev, (n * k, m), 100 + r), tensor(dev, (n * k, m), 200 + r)
    comm.all_to_all_single(out, inp)
    for s in range(n):
        theirs = tensor(dev, (n * k, m), 100 + s)  # rank s's input, made again from its seed
        assert torch.equal(out[s * k:(s + 1) * k], theirs[r * k:(r + 1) * k]), s
    gathered = tensor(dev, (n * n * k, m), 300 + r)
    comm.all_gather_into_tensor(gathered, inp)
    for s in range(n):
        assert torch.equal(gathered[s * n * k:(s + 1) * n * k], tensor(dev, (n * k, m), 100 + s)), s
    comm.broadcast(inp, 1)  # torch.distributed.broadcast(tensor, src)
    assert torch.equal(inp, tensor(dev, (n * k, m), 101)), "broadcast"
    # gather(tensor, gather_list, dst): the list on dst alone; scatter(tensor, scatter_list, src).
    mine = tensor(dev, (k, m), 400 + r)
    got = [tensor(dev, (k, m), 700 + s) for s in range(n)] if r == 2 else None  # random: unwritten shows
    comm.gather(mine, got, dst=2)
    if r == 2:
        for s in range(n):
            assert torch.equal(got[s], tensor(dev, (k, m), 400 + s)), ("gather", s)
    out = tensor(dev, (k, m), 500 + r)
    parts = [tensor(dev, (k, m), 600 + s) for s in range(n)] if r == 0 else None
    comm.scatter(out, parts, 0)
    assert torch.equal(out, tensor(dev, (k, m), 600 + r)), "scatter"
    try:
        comm.gather(mine, [mine] * n, dst=0 if r else 1)
        raise AssertionError("a gather_list off dst was taken")
    except conccl.Error as e:
        assert "only on the dst rank" in e.message, e.message
print("ok", r)
"""
        n = 3
        uid = conccl.unique_id()
        run_ranks(self, rank_script, n, uid)


if __name__ == "__main__":
    unittest.main()
