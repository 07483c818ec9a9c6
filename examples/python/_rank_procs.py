"""examples/python/_rank_procs.py - what the one-process-per-rank PyTorch
examples (torch_window_allgather.py, torch_pool_allgather.py,
torch_graph_allgather.py) share; not an example itself. The parent makes the
id and starts one process per rank (launch); each rank starts its watchdog,
opens its communicator (loopback ranks on GPU 0), runs rounds of
GEMM -> all-gather -> check on the current stream and times calls back to
back. torch is imported by the ranks only, after the watchdog starts.
"""
import contextlib
import os
import subprocess
import sys
import time


def launch(script, n, rank_args):
    """The parent: `script --rank r n *rank_args` for every rank r, with the
    id in CONCCL_EXAMPLE_UID and this checkout's python/ on PYTHONPATH; exits
    0 if every rank did, else 1."""
    python = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
    sys.path.insert(0, python)
    import conccl
    uid = conccl.unique_id()
    # The id is a secret (docs/multiprocess.md): in the environment, not on the command line.
    env = dict(os.environ, CONCCL_EXAMPLE_UID=uid,
               PYTHONPATH=os.pathsep.join(p for p in [os.environ.get("PYTHONPATH", ""), python] if p))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(script), "--rank", str(r), str(n), *rank_args],
                              env=env) for r in range(n)]
    rcs = [p.wait() for p in procs]
    sys.exit(0 if all(rc == 0 for rc in rcs) else 1)


def rank_uid():
    """A rank's copy of the id the parent made (launch)."""
    return os.environ["CONCCL_EXAMPLE_UID"]


def start_watchdog():
    """A rank that hangs dumps its stacks and exits after TORCH_WATCHDOG_S (240) seconds."""
    import faulthandler
    faulthandler.dump_traceback_later(int(os.environ.get("TORCH_WATCHDOG_S", "240")), exit=True)


def communicator(dev, r, n, uid):
    """Rank r of n on `dev`: a loopback rank on GPU 0."""
    import conccl
    return conccl.Communicator(dev, rank=r, nranks=n, unique_id=uid, gpu=0, loopback=True, timeout_ms=60000)


@contextlib.contextmanager
def pool_rank(r, n, uid, pool_bytes=64 << 20):
    """Rank r with GPU 0 current: its conccl.Device (process slot r), its
    communicator and a conccl.torch.SymmetricPool of pool_bytes on it, as
    (comm, pool). The caller closes the pool (collective: every rank) once
    the pool's tensors are gone."""
    import torch

    import conccl
    import conccl.torch
    torch.cuda.set_device(0)
    with conccl.Device("nv", process_slot=r) as dev:
        comm = communicator(dev, r, n, uid)
        yield comm, conccl.torch.SymmetricPool(comm, pool_bytes)


def pool_tensors(pool, *sizes):
    """uint8 CUDA tensors of these sizes from a conccl.torch.SymmetricPool."""
    import torch
    with torch.cuda.use_mem_pool(pool.mempool):  # every rank, the same allocations in the same order
        return [torch.empty(size, dtype=torch.uint8, device="cuda") for size in sizes]


def gemm_rounds(comm, inp, out, r, n, rounds, m):
    """`rounds` rounds on the current stream: rank r's input (an m x m int32
    matrix in `inp`) made by a GEMM, all-gathered into `out`, every rank's
    part compared with what that rank's GEMM gives. Returns the wrong words
    and the bootstrap messages per call; raises the communicator's
    asynchronous error."""
    import torch
    chunk = m * m * 4

    def operands(s, k):
        # Small integers: the GEMM's sums are exact in fp32, so every
        # rank can compute every rank's input bit for bit.
        g = torch.Generator(device="cuda").manual_seed(1000 * k + s)
        a = torch.randint(-4, 5, (m, m), generator=g, device="cuda").float()
        b = torch.randint(-4, 5, (m, m), generator=g, device="cuda").float()
        return a, b

    bad = torch.zeros((), dtype=torch.int64, device="cuda")
    stats0 = comm.stats()
    for k in range(rounds):
        a, b = operands(r, k)
        inp.view(torch.int32).view(m, m).copy_((a @ b).to(torch.int32))  # producer: a GEMM on the stream
        comm.all_gather_into_tensor(out, inp)                             # on the current stream
        for s in range(n):                                                # consumers: kernels on the stream
            sa, sb = operands(s, k)
            want = (sa @ sb).to(torch.int32).view(-1)
            got = out[s * chunk:(s + 1) * chunk].view(torch.int32)
            bad += (got != want).sum()
    torch.cuda.synchronize()
    stats1 = comm.stats()
    err = comm.async_error()
    if err is not None:
        raise err
    msgs = (stats1["bootstrap_messages_sent"] - stats0["bootstrap_messages_sent"] +
            stats1["bootstrap_messages_received"] - stats0["bootstrap_messages_received"]) / rounds
    return int(bad), msgs


def time_calls(comm, out, inp, iters, warmup):
    """Microseconds per all-gather of `iters` back to back on the current
    stream, after `warmup` calls."""
    import torch
    for _ in range(warmup):
        comm.all_gather_into_tensor(out, inp)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.all_gather_into_tensor(out, inp)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def allocator_example_main(script, rank_main, default_rounds=100):
    """main() of an example run as `script [ranks] [rounds] [--default-allocator]`:
    in a rank (--rank), rank_main(r, n, uid, rounds, default_allocator)'s
    return code; else the ranks started (launch)."""
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        r, n, rounds, default = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        sys.exit(rank_main(r, n, rank_uid(), rounds, default == "1"))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    default = "--default-allocator" in sys.argv[1:]
    n = int(args[0]) if args else 2
    rounds = int(args[1]) if len(args) > 1 else default_rounds
    launch(script, n, [str(rounds), "1" if default else "0"])
