"""tests/python/test_conccl.py - the Python package over the C API, on the emulated node.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=python and
CONCCL_LIBRARY=<build>/src/libconccl.so.
"""
import os
import unittest

import conccl


class DeviceTest(unittest.TestCase):
    def test_unknown_backend_is_an_error_with_the_message(self):
        with self.assertRaises(conccl.Error) as cm:
            conccl.Device("tpu")
        self.assertEqual(cm.exception.status, "invalid_argument")
        self.assertIn("unknown backend 'tpu'", cm.exception.message)

    def test_topology_and_engines(self):
        with conccl.Device("emu", preset="mi300x") as dev:
            self.assertEqual(dev.gpu_count, 8)
            topo = dev.topology()
            self.assertEqual(topo["backend"], "emu")
            self.assertEqual(len(topo["gpus"]), 8)
            self.assertEqual(len(dev.engines(0)), 16)
            with self.assertRaises(conccl.Error) as cm:
                dev.engines(8)
            self.assertEqual(cm.exception.status, "not_found")

    def test_queue_copy_signal_and_zero_copy_views(self):
        with conccl.Device("emu", preset="mi300x") as dev:
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
        with conccl.Device("emu", preset="mi300x") as dev:
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


    def test_one_process_per_rank(self):
        # Each rank a Python process of its own, as torch.distributed runs:
        # the id made here, handed over on the command line.
        import subprocess
        import sys
        uid = conccl.unique_id()
        self.assertTrue(uid.startswith("conccl-uid-"))
        rank_script = '''
import hashlib, sys, conccl
r, n, uid, chunk = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], 70000
data = lambda s: hashlib.sha256(bytes([s])).digest() * (chunk // 32) + bytes(chunk % 32)
with conccl.Device("emu", preset="mi300x", process_slot=r) as dev:
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
        procs = [subprocess.Popen([sys.executable, "-c", rank_script, str(r), str(n), uid],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, f"rank {r}: {err}")
            self.assertEqual(out.strip(), f"ok {r}")
        with conccl.Device("emu") as dev:
            with self.assertRaises(conccl.Error) as cm:
                conccl.Communicator(dev, rank=0, nranks=2, unique_id="nope")
            self.assertEqual(cm.exception.status, "invalid_argument")

    def test_per_engine_queues_and_release_by_stores(self):
        # Another writer releases a prelaunched plan with the stores it names:
        # here an engine (a queue's dword fills), as a compute stream would.
        with conccl.Device("emu", preset="h200") as dev:
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
        with conccl.Device("emu", preset="h200") as dev:
            with self.assertRaises(conccl.Error) as cm:
                dev.alloc_cuda(0, 4096)
            self.assertEqual(cm.exception.status, "unavailable")
            self.assertIn("nv backend", cm.exception.message)
            comm = conccl.Communicator(dev, [0, 0], loopback=True)
            with self.assertRaises(conccl.Error) as cm:
                comm.all_gather_into_tensor([b"x", b"y"], [b"x", b"y"])
            self.assertEqual(cm.exception.status, "invalid_argument")
            self.assertIn("CUDA torch tensor", cm.exception.message)
            send = [dev.alloc(0, 4096) for _ in range(2)]
            recv = [dev.alloc(0, 8192) for _ in range(2)]
            plan = comm.plan("all_gather", 4096, send, recv, prelaunch=True)
            with self.assertRaises(conccl.Error) as cm:
                plan.enqueue_on_stream(conccl.CU_STREAM_LEGACY)
            self.assertEqual(cm.exception.status, "unavailable")


class DLPackTest(unittest.TestCase):
    def test_numpy_from_dlpack_is_a_zero_copy_view(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        if not hasattr(np, "from_dlpack"):
            self.skipTest("this numpy has no from_dlpack")
        with conccl.Device("emu", preset="mi300x") as dev:
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


if __name__ == "__main__":
    unittest.main()
