"""tests/python/test_torch_fsdp_comms.py - FSDP2's custom all-gather and reduce-scatter
(conccl.torch.FSDPAllGather / FSDPReduceScatter) with the process group on gloo, and on
"conccl" itself.

Each worker drives the two comms as FSDP2's foreach_all_gather and foreach_reduce do
(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): allocate the all-gather
output, fill this rank's slice of it (the input is a view into the output), call with
the group and async_op; allocate the reduce-scatter input, fill it, call into a new
output with the op. The group is gloo (the default group) and a gloo sub-group of
ranks 0 and 2: the comms run on a "conccl" companion group over the same ranks, made
at the first call, on the emulated node (with the group on "conccl", the group itself:
its own companion). Every output is compared bit for bit with
the inputs (all-gather) or the library's reduction in rank order (ref_reduce of
test_torch_backend). Torch 1.13 has no FSDP2; the GPU machine's torch runs the comms
inside FSDP2 (examples/python/fsdp2_train.py --fsdp-comms conccl --check).
"""
import multiprocessing as mp
import os
import tempfile
import traceback
import unittest

try:
    import torch
    import torch.distributed as dist
except ImportError:  # pragma: no cover - skipped, saying why
    torch = None

DEADLINE_S = 180


def worker(rank, world, init, results, backend, pool_bytes):
    os.environ["CONCCL_BACKEND"] = "emu"
    os.environ["CONCCL_TORCH_POOL_BYTES"] = str(pool_bytes)
    problems, checks = [], 0
    try:
        import conccl.torch
        from conccl.torch_backend import ProcessGroupConccl
        from test_torch_backend import _PremulLike, gen, ref_reduce

        dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
        sub = dist.new_group([0, 2])  # every rank makes it; ranks 0 and 2 use it
        groups = [("world", dist.distributed_c10d._get_default_group(), list(range(world)))]
        if rank in (0, 2):
            groups.append(("sub", sub, [0, 2]))

        def expect(name, ok):
            nonlocal checks
            checks += 1
            if not ok:
                problems.append(name)

        comms = {}
        for gname, group, members in groups:
            n, me = len(members), members.index(rank)
            # With pool room, comms made with their group carve FSDP's buffers from its pool.
            bound = group if pool_bytes else None
            ag, rs = comms[gname] = conccl.torch.FSDPAllGather(bound), conccl.torch.FSDPReduceScatter(bound)
            # All-gather in place, as FSDP2 does it: the input is this rank's slice of the output.
            for dtype in ("float32", "bfloat16", "uint8", "int64"):
                for k, async_op in ((1000, False), (4097, True), (3, False)):
                    tag = (gname, "ag", dtype, k)
                    one = gen((k,), dtype, "SUM", *tag, rank)
                    out = ag.allocate((n * k,), dtype=one.dtype, device=torch.device("cpu"))
                    inp = out.narrow(0, me * k, k)
                    inp.copy_(one)
                    work = ag(out, inp, group, async_op=async_op)
                    if async_op:
                        work.wait()
                    else:
                        expect(f"{gname} all-gather returns None when not async", work is None)
                    want = torch.cat([gen((k,), dtype, "SUM", *tag, r) for r in members])
                    expect(f"{gname} all-gather {dtype} x {k} (async {async_op})", torch.equal(out, want))
            # Reduce-scatter: FSDP2's gradients (float32 here) with AVG and SUM; others by type.
            for dtype, ops in (("float32", ("AVG", "SUM", "MAX")), ("bfloat16", ("SUM", "AVG")),
                               ("int32", ("SUM", "MIN")), ("uint8", ("MAX",))):
                for op in ops:
                    for k, async_op in ((777, False), (2048, True)):
                        tag = (gname, "rs", dtype, op, k)
                        full = gen((n * k,), dtype, op, *tag, rank)
                        inp = rs.allocate((n * k,), dtype=full.dtype, device=torch.device("cpu"))
                        inp.copy_(full)
                        out = inp.new_empty((k,))
                        work = rs(out, inp, group, getattr(dist.ReduceOp, op), async_op=async_op)
                        if async_op:
                            work.wait()
                        pieces = [gen((n * k,), dtype, op, *tag, r)[me * k:(me + 1) * k] for r in members]
                        expect(f"{gname} reduce-scatter {dtype} {op} x {k}",
                               torch.equal(out, ref_reduce(pieces, op, dtype)))
            # PREMUL_SUM: FSDP2's gradient divide factor (torch 1.x: an op shaped as torch 2's).
            k = 500
            full = gen((n * k,), "float32", "SUM", gname, "premul", rank)
            out = torch.empty(k)
            op = dist._make_nccl_premul_sum(0.25)
            if not isinstance(getattr(op, "__getstate__", lambda: None)(), tuple):
                op = _PremulLike(0.25)
            rs(out, full, group, op)
            pieces = [gen((n * k,), "float32", "SUM", gname, "premul", r)[me * k:(me + 1) * k] for r in members]
            expect(f"{gname} reduce-scatter PREMUL_SUM(0.25)", torch.equal(out, ref_reduce(pieces, "SUM", "float32") * 0.25))

        ag, rs = comms["world"]
        if pool_bytes:
            # allocate() carved from the companion's pool, the ops took the tensors as they
            # are, and every rank's buffers lie at the same offsets.
            cw = conccl.torch.companion_group(None)
            expect("allocate() used the pool", ag.pool_tensors > 0 and rs.pool_tensors > 0 and ag.other_tensors == 0)
            expect("pool tensors went in directly", cw.stats()["direct_calls"] > 0)
            pool = cw._pool
            out = ag.allocate((world * 64,), dtype=torch.float32, device=torch.device("cpu"))
            rs_in = rs.allocate((world * 32,), dtype=torch.float32, device=torch.device("cpu"))
            offsets = [pool._ptr(out) - pool.base, pool._ptr(rs_in) - pool.base] if pool.owns(out) else None
            every = [None] * world
            dist.all_gather_object(every, offsets)
            expect("pool buffers at the same offsets on every rank", offsets is not None and every == [offsets] * world)
            direct = cw.stats()["direct_calls"]
            out.narrow(0, rank * 64, 64).copy_(torch.arange(64.0) + rank)
            ag(out, out.narrow(0, rank * 64, 64), None)
            expect("a pooled all-gather", torch.equal(out, torch.cat([torch.arange(64.0) + r for r in range(world)])))
            expect("... went in directly", cw.stats()["direct_calls"] == direct + 1)
            del out, rs_in
            # More than the pool holds: torch's allocator, staged, still right.
            big = ag.allocate((world * (pool_bytes // 4),), dtype=torch.float32, device=torch.device("cpu"))
            expect("too large for the pool: torch's tensor", not pool.owns(big))
            one = gen((pool_bytes // 4,), "float32", "SUM", "big", rank)
            big.narrow(0, rank * one.numel(), one.numel()).copy_(one)
            ag(big, big.narrow(0, rank * one.numel(), one.numel()), None)
            expect("a staged all-gather beside the pool",
                   torch.equal(big, torch.cat([gen((pool_bytes // 4,), "float32", "SUM", "big", r) for r in range(world)])))
        else:
            expect("no pool room: torch's tensors", ag.pool_tensors == 0 and ag.other_tensors > 0)

        # The companions: one per set of ranks, made once, a "conccl" group of the right size
        # (a "conccl" group is its own).
        cw = conccl.torch.companion_group(None)
        expect("a conccl group is its own companion",
               backend != "conccl" or cw is dist.distributed_c10d._get_default_group())
        expect("the world's companion is a conccl group", isinstance(cw, ProcessGroupConccl))
        expect("one companion per set of ranks", conccl.torch.companion_group(None) is cw)
        expect("the companion has the group's size and rank", (cw.size(), cw.rank()) == (world, rank))
        if rank in (0, 2):
            cs = conccl.torch.companion_group(sub)
            expect("the sub-group's companion has 2 ranks", cs.size() == 2 and cs is not cw)
        else:
            try:
                conccl.torch.companion_group(sub)
                problems.append("a group this rank is not in was taken")
            except RuntimeError as e:
                expect("not in the group: named", "is not in the group" in str(e))
        # A bad call names the problem, and the comms go on.
        try:
            ag(torch.empty(world * 10 + 1), torch.empty(10), None)
            problems.append("a mismatched all-gather was taken")
        except RuntimeError as e:
            expect("mismatched all-gather named", "all_gather_into_tensor" in str(e))
        out = torch.empty(world * 5)
        ag(out, torch.full((5,), float(rank + 1)), None)
        expect("an all-gather after the refused one",
               torch.equal(out, torch.cat([torch.full((5,), float(r + 1)) for r in range(world)])))
        dist.barrier()
        dist.destroy_process_group()
        if backend == "gloo":
            # A new default group: the old companions go, new ones are made for it.
            old = cw
            dist.init_process_group(backend, init_method=init + "2", rank=rank, world_size=world)
            ag2 = conccl.torch.FSDPAllGather(None)
            out = torch.empty(world * 7)
            ag2(out, torch.full((7,), float(rank * 3)), None)
            expect("an all-gather in a second world",
                   torch.equal(out, torch.cat([torch.full((7,), float(r * 3)) for r in range(world)])))
            expect("a new companion for the new world", conccl.torch.companion_group(None) is not old)
            from conccl import torch_fsdp
            expect("the old world's companions went", all(pg is not old for _, pg in torch_fsdp._COMPANIONS.values()))
            dist.barrier()
            dist.destroy_process_group()
    except Exception:
        problems.append(traceback.format_exc())
    results.put((rank, checks, problems))


@unittest.skipIf(torch is None, "PyTorch is not installed (apt-get install python3-torch)")
class FsdpComms(unittest.TestCase):
    def test_fsdp_comms_on_a_gloo_group_3_ranks(self):
        self.run_world(3, "gloo")

    def test_fsdp_comms_on_a_conccl_group_3_ranks(self):
        self.run_world(3, "conccl")

    def test_fsdp_comms_from_the_pool_on_a_gloo_group_3_ranks(self):  # allocate() carves the pool
        self.run_world(3, "gloo", pool_bytes=1 << 20)

    def run_world(self, world, backend, pool_bytes=0):
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        with tempfile.TemporaryDirectory() as d:
            init = "file://" + os.path.join(d, "init")
            procs = [ctx.Process(target=worker, args=(r, world, init, results, backend, pool_bytes), daemon=True) for r in range(world)]
            for p in procs:
                p.start()
            got = {}
            try:
                for _ in range(world):
                    rank, checks, problems = results.get(timeout=DEADLINE_S)
                    got[rank] = (checks, problems)
            finally:
                for p in procs:
                    p.join(10)
                    if p.is_alive():
                        p.kill()
        for rank in range(world):
            checks, problems = got[rank]
            self.assertEqual(problems, [], f"rank {rank}")
            self.assertGreater(checks, 40, f"rank {rank} ran its checks")
        print(f"fsdp comms: {world} ranks, group on {backend}, pool {pool_bytes} bytes, {sum(c for c, _ in got.values())} checks, all passed")


if __name__ == "__main__":
    unittest.main()
