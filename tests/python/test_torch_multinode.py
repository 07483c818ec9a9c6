"""tests/python/test_torch_multinode.py - "conccl" process groups across nodes.

One machine is treated as several nodes: CONCCL_RANKS_PER_NODE=L puts global
ranks [jL, (j+1)L) on node j (conccl/torch_hier.py). Each node's ranks share a
ConCCL communicator on the emulated node; gloo runs between the nodes (one
gloo group per local index).

Every op of the "conccl" backend runs twice on the same data: across 2 nodes
(2 x 2 and 2 x 4 ranks) and with every rank on one node (the same world, no
override). Each worker saves every output; the parent compares the two runs
element for element: moves and integer reductions must be equal bit for bit;
float reductions (rounded once per node across nodes, in rank order on one
node) within a bound of a few units of rounding of the magnitudes summed. The
one-node run's all-gather is also checked against the inputs themselves, so a
run that computed nothing cannot pass.

Also: a sub-group with one rank per node (new_group across nodes), a broadcast
and a scatter from a root that is not local rank 0, uneven all_to_all_single
splits, send/recv between nodes, the group's type and stats, and a world whose
nodes hold different numbers of ranks (every rank's init_process_group must
raise, saying so).
"""
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
import unittest
import zlib
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
except ImportError:  # pragma: no cover - skipped, saying why
    torch = None
    dist = None

DEADLINE_S = float(os.environ.get("CONCCL_TORCH_TEST_DEADLINE", "240"))
FLOAT_REDUCTIONS = set()  # names of outputs compared with a tolerance


def gen(shape, dtype, *tag):
    g = torch.Generator().manual_seed(zlib.crc32("|".join(map(str, tag)).encode()))
    if dtype in (torch.float32, torch.bfloat16, torch.float16):
        return ((torch.rand(shape, generator=g) * 8 - 4) + 1e-3).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.int64).to(torch.uint8)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g, dtype=torch.int64).bool()
    lo, hi = (-1000, 1001) if "PRODUCT" in tag else (-2 ** 30, 2 ** 30)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def run_ops(rank, n, L, out):
    """Every op, its outputs into `out` (name -> tensor)."""
    R = dist.ReduceOp
    for dtype, ops in ((torch.float32, ("SUM", "MAX", "AVG")), (torch.bfloat16, ("SUM",)),
                       (torch.int64, ("SUM", "PRODUCT", "MIN", "MAX", "AVG")), (torch.int32, ("SUM", "AVG")),
                       (torch.uint8, ("SUM", "MAX")), (torch.float64, ("SUM",)), (torch.bool, ("MAX",))):
        for op in ops:
            is_float = dtype.is_floating_point and op in ("SUM", "AVG", "PRODUCT")
            t = gen((3, 333), dtype, "ar", dtype, op, rank)  # 999 elements: padded to the slots
            dist.all_reduce(t, op=getattr(R, op))
            out[f"all_reduce/{dtype}/{op}"] = t
            o = torch.empty(37, dtype=dtype)
            dist.reduce_scatter_tensor(o, gen((n * 37,), dtype, "rs", dtype, op, rank), op=getattr(R, op)) \
                if hasattr(dist, "reduce_scatter_tensor") else \
                dist._reduce_scatter_base(o, gen((n * 37,), dtype, "rs", dtype, op, rank), op=getattr(R, op))
            out[f"reduce_scatter_tensor/{dtype}/{op}"] = o
            if is_float:
                FLOAT_REDUCTIONS.update({f"all_reduce/{dtype}/{op}", f"reduce_scatter_tensor/{dtype}/{op}"})
    # PREMUL_SUM: the sum times its factor (0.5: exact), checked against this run's own SUM
    # and, as every output, against the other run. Torch 1.x keeps the factor from Python:
    # there the group's op is given an op shaped as torch 2's (test_torch_backend._PremulLike).
    from conccl.torch_backend import _Opts
    from test_torch_backend import _PremulLike
    op = dist._make_nccl_premul_sum(0.5)
    native = isinstance(getattr(op, "__getstate__", lambda: None)(), tuple)
    pg = dist.distributed_c10d._get_default_group()
    for name, shape in (("all_reduce", (999,)), ("reduce_scatter_tensor", (n * 37,))):
        x = gen(shape, torch.float32, "premul", name, rank)
        got, summed = x.clone(), x.clone()
        if name == "all_reduce":
            dist.all_reduce(summed, op=R.SUM)
            dist.all_reduce(got, op=op) if native else pg.allreduce([got], _Opts(reduceOp=_PremulLike(0.5))).wait()
        else:
            got, summed = torch.empty(37), torch.empty(37)
            dist.reduce_scatter_tensor(summed, x, op=R.SUM)
            dist.reduce_scatter_tensor(got, x, op=op) if native else \
                pg._reduce_scatter_base(got, x, _Opts(reduceOp=_PremulLike(0.5))).wait()
        if not torch.equal(got, summed * 0.5):
            raise AssertionError(f"{name} PREMUL_SUM(0.5) is not the sum times 0.5 in {type(pg).__name__}")
        out[f"{name}/premul_sum"] = got
        FLOAT_REDUCTIONS.add(f"{name}/premul_sum")
    t = gen((1001,), torch.float32, "reduce", rank)
    dist.reduce(t, dst=n - 1, op=R.SUM)
    out["reduce"] = t if rank == n - 1 else gen((1001,), torch.float32, "reduce", rank)
    FLOAT_REDUCTIONS.add("reduce")
    ins = [gen((5, 7), torch.int64, "rsl", rank, d) for d in range(n)]
    o = torch.empty(5, 7, dtype=torch.int64)
    dist.reduce_scatter(o, ins, op=R.SUM)
    out["reduce_scatter"] = o

    for dtype in (torch.float32, torch.uint8, torch.bfloat16):
        o = torch.empty(n * 515, dtype=dtype)
        dist.all_gather_into_tensor(o, gen((515,), dtype, "ag", dtype, rank)) \
            if hasattr(dist, "all_gather_into_tensor") else \
            dist._all_gather_base(o, gen((515,), dtype, "ag", dtype, rank))
        out[f"all_gather_into_tensor/{dtype}"] = o
    outs = [torch.empty(4, 9, dtype=torch.int32) for _ in range(n)]
    dist.all_gather(outs, gen((4, 9), torch.int32, "agl", rank))
    out["all_gather"] = torch.stack(outs)

    root = n - 1 if n > 2 else 1  # a rank that is not local rank 0 of its node
    t = gen((777,), torch.int64, "bc", rank)
    dist.broadcast(t, src=root)
    out["broadcast"] = t
    o = torch.empty(6, dtype=torch.float32)
    dist.scatter(o, [gen((6,), torch.float32, "sc", d) for d in range(n)] if rank == root else None, src=root)
    out["scatter"] = o
    g = [torch.empty(11, dtype=torch.int64) for _ in range(n)] if rank == 0 else None
    dist.gather(gen((11,), torch.int64, "ga", rank), g, dst=0)
    if rank == 0:
        out["gather"] = torch.stack(g)

    o = torch.empty(n * 13, dtype=torch.float32)
    dist.all_to_all_single(o, gen((n * 13,), torch.float32, "a2a", rank))
    out["all_to_all_single"] = o
    sends = [(rank + d) % 3 + (d == 0) for d in range(n)]  # uneven, one empty piece per rank unless n < 3
    recvs = [(s + rank) % 3 + (rank == 0) for s in range(n)]
    o = torch.empty(sum(recvs), 3, dtype=torch.int64)
    dist.all_to_all_single(o, gen((sum(sends), 3), torch.int64, "a2av", rank), recvs, sends)
    out["all_to_all_single/uneven"] = o
    # Skewed: rank 1 sends 5 rows to rank 2, every other pair 1; rank 0's splits are all
    # equal, yet smaller than the largest of another pair (its slots are padded).
    sends = [1 + 4 * (rank == 1 and d == 2) for d in range(n)]
    recvs = [1 + 4 * (s == 1 and rank == 2) for s in range(n)]
    o = torch.empty(sum(recvs), 2, dtype=torch.float32)
    dist.all_to_all_single(o, gen((sum(sends), 2), torch.float32, "a2as", rank), recvs, sends)
    out["all_to_all_single/skewed"] = o
    if n > 2 and rank == 0:  # checked against the inputs, not only against the other run
        # every rank's first row (rank 0 is every sender's first destination)
        want = torch.cat([gen((sum(1 + 4 * (q == 1 and d == 2) for d in range(n)), 2), torch.float32, "a2as", q)[0:1]
                          for q in range(n)])
        if not torch.equal(o, want):
            raise AssertionError("all_to_all_single/skewed: rank 0 got the wrong rows")
    outs = [torch.empty(d + 1, dtype=torch.uint8) for d in range(n)]
    dist.all_to_all(outs, [gen((rank + 1,), torch.uint8, "a2al", rank, d) for d in range(n)])
    out["all_to_all"] = torch.cat(outs)
    dist.barrier()

    # Between nodes: rank 0 (node 0) to the last rank (the last node).
    if rank == 0:
        dist.send(gen((100,), torch.float32, "p2p"), dst=n - 1)
    elif rank == n - 1:
        t = torch.empty(100, dtype=torch.float32)
        dist.recv(t, src=0)
        out["recv"] = t

    # A group of one rank per node of the L-rank layout (local rank 1 of each): across
    # nodes with a local size of 1 there, on one node in the one-node run.
    members = list(range(1, n, L))
    sub = dist.new_group(members)
    if rank in members:
        o = torch.empty(len(members) * 21, dtype=torch.int64)
        dist.all_gather_into_tensor(o, gen((21,), torch.int64, "sub", rank), group=sub) \
            if hasattr(dist, "all_gather_into_tensor") else \
            dist._all_gather_base(o, gen((21,), torch.int64, "sub", rank), group=sub)
        out["subgroup_all_gather"] = o
        t = gen((50,), torch.int64, "subar", rank)
        dist.all_reduce(t, group=sub)
        out["subgroup_all_reduce"] = t


def worker(rank, world, per_node, L, tmpdir):
    res = {"rank": rank, "status": "ok"}
    try:
        os.environ["CONCCL_BACKEND"] = "emu"
        os.environ.pop("CONCCL_RANKS_PER_NODE", None)
        os.environ.pop("CONCCL_NODE", None)
        if isinstance(per_node, int):
            os.environ["CONCCL_RANKS_PER_NODE"] = str(per_node)
        elif per_node:  # explicit node names, one per rank
            os.environ["CONCCL_NODE"] = per_node[rank]
        import conccl.torch  # noqa: F401 - registers "conccl"
        dist.init_process_group("conccl", init_method="file://" + os.path.join(tmpdir, "store"), rank=rank,
                                world_size=world, timeout=timedelta(seconds=60))
        pg = dist.distributed_c10d._get_default_group()
        res["group"] = type(pg).__name__
        if hasattr(pg, "stats"):
            res["stats"] = {k: v for k, v in pg.stats().items() if isinstance(v, (int, str))}
        out = {}
        run_ops(rank, world, L, out)
        torch.save(out, os.path.join(tmpdir, "out.%d.pt" % rank))
        res["float_reductions"] = sorted(FLOAT_REDUCTIONS)
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent
        res["status"], res["error"] = "fatal", traceback.format_exc()
    with open(os.path.join(tmpdir, "result.%d.json" % rank), "w") as f:
        json.dump(res, f)
    sys.stdout.flush()
    os._exit(0)


def launch(world, per_node, L=2):
    """Runs the workers; returns (per-rank results, per-rank outputs, problems)."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="conccl-multinode-") as tmpdir:
        procs = [ctx.Process(target=worker, args=(r, world, per_node, L, tmpdir), daemon=True) for r in range(world)]
        end = time.monotonic() + DEADLINE_S
        for p in procs:
            p.start()
        # A rank that failed leaves the others waiting in a collective: give them 10 s more.
        while any(p.is_alive() for p in procs) and time.monotonic() < end:
            time.sleep(0.25)
            for r in range(world):
                try:
                    with open(os.path.join(tmpdir, "result.%d.json" % r)) as f:
                        failed = json.load(f)["status"] != "ok"
                except (OSError, ValueError, KeyError):
                    failed = False
                if failed:
                    end = min(end, time.monotonic() + 10)
        problems = []
        for r, p in enumerate(procs):
            if p.is_alive():
                p.kill()
                problems.append(f"rank {r}: still running at the deadline (killed)")
        results, outputs = {}, {}
        for r in range(world):
            try:
                with open(os.path.join(tmpdir, "result.%d.json" % r)) as f:
                    results[r] = json.load(f)
            except (OSError, ValueError):
                problems.append(f"rank {r}: no result")
                continue
            path = os.path.join(tmpdir, "out.%d.pt" % r)
            if os.path.exists(path):
                outputs[r] = torch.load(path)
    return results, outputs, problems


def close(a, b):
    """Float reductions: within a few units of rounding of the larger magnitude."""
    eps = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}[a.dtype]
    x, y = a.double(), b.double()
    bound = 64 * eps * torch.maximum(x.abs(), y.abs()).clamp(min=1.0)
    return bool(((x - y).abs() <= bound).all())


@unittest.skipIf(torch is None, "torch is not installed for this python3 (apt-get install python3-torch)")
class MultiNodeTest(unittest.TestCase):
    def run_both(self, nodes, per_node):
        world = nodes * per_node
        hier, hout, hp = launch(world, per_node, per_node)
        flat, fout, fp = launch(world, None, per_node)
        problems = hp + fp
        for name, results in (("across nodes", hier), ("one node", flat)):
            for r, res in results.items():
                if res["status"] != "ok":
                    problems.append(f"{name}, rank {r}:\n{res.get('error')}")
        self.assertFalse(problems, "\n".join(problems))
        for r in range(world):
            self.assertEqual(hier[r]["group"], "HierarchicalGroup")
            self.assertEqual(flat[r]["group"], "ProcessGroupConccl")
            s = hier[r]["stats"]
            self.assertEqual((s["node"], s["nodes"], s["local_rank"], s["local_size"], s["inter_node_backend"]),
                             (r // per_node, nodes, r % per_node, per_node, "gloo"))
        floats = set(hier[0]["float_reductions"])
        compared = 0
        for r in range(world):
            self.assertEqual(sorted(hout[r]), sorted(fout[r]), f"rank {r}: the two runs made different outputs")
            for name in sorted(fout[r]):
                a, b = hout[r][name], fout[r][name]
                self.assertEqual((a.dtype, tuple(a.shape)), (b.dtype, tuple(b.shape)), f"rank {r}: {name}")
                if name in floats:
                    self.assertTrue(close(a, b), f"rank {r}: {name}: across nodes differs from one node beyond "
                                                 f"rounding (max |diff| {(a.double() - b.double()).abs().max()})")
                else:
                    self.assertTrue(torch.equal(a, b), f"rank {r}: {name}: across nodes differs from one node "
                                                       f"({int((a != b).sum())} of {a.numel()} elements)")
                compared += a.numel()
            # The one-node run itself: the all-gather is every rank's input in rank order.
            want = torch.cat([gen((515,), torch.float32, "ag", torch.float32, q) for q in range(world)])
            self.assertTrue(torch.equal(fout[r]["all_gather_into_tensor/torch.float32"], want))
        sys.stderr.write(f"\n[{nodes} nodes x {per_node} ranks] {compared} elements compared\n")

    def test_2_nodes_x_2_ranks(self):
        self.run_both(2, 2)

    def test_2_nodes_x_4_ranks(self):
        self.run_both(2, 4)

    def test_unequal_nodes_are_refused(self):
        results, _, problems = launch(4, ["a", "a", "a", "b"])
        self.assertFalse(problems, "\n".join(problems))
        for r, res in results.items():
            self.assertEqual(res["status"], "fatal", f"rank {r} made a group across unequal nodes")
            self.assertIn("[3, 1] per node", res["error"])


if __name__ == "__main__":
    unittest.main()
