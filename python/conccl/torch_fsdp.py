"""FSDP2's all-gather and reduce-scatter on the DMA engines while the model's process
group stays on another backend (NCCL, gloo).

FSDP2 (torch.distributed.fsdp.fully_shard) lets a program replace the two collectives
of its training step: FSDPModule.set_custom_all_gather(comm) and
set_custom_reduce_scatter(comm), where comm follows torch's Comm interface
(torch/distributed/fsdp/_fully_shard/_fsdp_api.py: allocate(size, dtype=, device=) and
__call__(output_tensor, input_tensor, group, [op,] async_op) -> Work | None). These
classes implement it:

    model = fully_shard(model, mesh=mesh)                 # mesh on NCCL, as before
    model.set_custom_all_gather(conccl.torch.FSDPAllGather(mesh.get_group()))
    model.set_custom_reduce_scatter(conccl.torch.FSDPReduceScatter(mesh.get_group()))

so the parameters' all-gathers and the gradients' reduce-scatters move on the copy
engines, beside the step's kernels, and everything else (DDP buckets, the optimizer's
all-reduces, object collectives) stays on the group's own backend.

Each call runs on a "conccl" process group over the same ranks as the group FSDP
passes (its companion): made at the first call on that group, which FSDP makes on
every rank of the group alike, through torch's default store (a prefix of its own),
and kept while torch's default group lasts. A group that is already a "conccl" group is used as
it is. The ops are those of that group (conccl/torch_backend.py): ordered on the
current stream (FSDP's all-gather and reduce-scatter streams), tensors of any
allocator staged through the group's window, the Work's wait() ordering the caller's
stream after the op.

allocate() gives the buffers FSDP gathers into and reduce-scatters from and into. For
comms made with their group (FSDPAllGather(mesh.get_group())) and room in the companion's
pool (CONCCL_TORCH_POOL_BYTES per rank, set before the companion is made: FSDP's
all-gather outputs and reduce-scatter buffers in flight, and the sharded gradients, which
live in the reduce-scatter outputs until zero_grad) they are tensors of the pool, at the
same offsets on every rank, and the ops take them with no staging copy: no copy kernel at
all, only the engines (and the reduce-scatter's reduce step). Otherwise tensors of
torch's allocator, staged (a device copy in and out per op).
"""
import threading
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist

import conccl

try:  # torch >= 2.6 (FSDP2's custom comms): subclass its interface, so FSDP takes ours as its own
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGatherBase
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatterBase
except Exception:  # older torch (1.13's fsdp package does not even import on Python 3.11: a
    # ValueError): the same calls, for programs that drive them by hand
    _AllGatherBase = _ReduceScatterBase = object

_LOCK = threading.Lock()
_COMPANIONS = {}  # (id of the default store, the group's global ranks) -> (store, group)
_DEFAULT_TIMEOUT = timedelta(minutes=30)  # torch.distributed's default_pg_timeout


def _global_ranks(group):
    """The global ranks of a process group, in group-rank order."""
    if hasattr(dist, "get_process_group_ranks"):  # torch >= 2.0
        return list(dist.get_process_group_ranks(group))
    ranks = dist.distributed_c10d._pg_group_ranks[group]  # torch 1.13: {global rank: group rank}
    return [g for g, _ in sorted(ranks.items(), key=lambda kv: kv[1])]


def companion_group(group=None, timeout=None):
    """The "conccl" process group over the same ranks as `group` (the default group when
    None): `group` itself if it is one, else one made at the first call for these ranks
    (collective over them: every rank of the group calls it alike) and kept. Its ops are
    the methods torch.distributed calls on a backend (_allgather_base,
    _reduce_scatter_base, allreduce, ...); torch's dist.* functions do not know it as a
    group of theirs."""
    from conccl.torch_backend import ProcessGroupConccl
    from conccl.torch_hier import HierarchicalGroup

    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if isinstance(group, (ProcessGroupConccl, HierarchicalGroup)):
        return group
    me = dist.get_rank()
    ranks = () if group is dist.GroupMember.NON_GROUP_MEMBER else tuple(_global_ranks(group))
    if me not in ranks:
        raise RuntimeError(f"conccl FSDP comm: this process (global rank {me}) is not in the group "
                           f"{'of ranks ' + str(list(ranks)) if ranks else '(new_group gave it no group)'} that the "
                           "call names")
    store = dist.distributed_c10d._get_default_store()
    key = (id(store), ranks)
    with _LOCK:
        hit = _COMPANIONS.get(key)
        if hit is not None:
            return hit[1]
        # Companions of an earlier default group (destroy_process_group, then a new one)
        # go: their ranks' processes made the same switch, and nothing calls them any more.
        for k in [k for k in _COMPANIONS if k[0] != id(store)]:
            del _COMPANIONS[k]
        # The default store outlives its groups; the prefix names the ranks, so each set of
        # ranks puts its own unique id. The entry keeps the store, so its id is not reused.
        prefix = "conccl/companion/" + "-".join(str(r) for r in ranks) + "/"
        pg = ProcessGroupConccl(dist.PrefixStore(prefix, store), ranks.index(me), len(ranks),
                                timeout or _DEFAULT_TIMEOUT, slot=me)
        _COMPANIONS[key] = (store, pg)
        return pg


class _PoolBlocks:
    """Tensors for FSDP carved from a companion group's SymmetricPool, so that its ops take
    them as they are (no staging copy; ProcessGroupConccl._direct).

    Offsets: the heap's allocator is deterministic (first fit), and FSDP allocates and
    frees these buffers in program order, the same on every rank, so every rank's tensor of
    a call lies at the same offset, as the window calls need. A block goes back to the heap
    when its storage dies, at once, so the offsets never depend on timing.

    Reuse in stream order: at that free, CUDA events are recorded on the freeing thread's
    current stream (where FSDP's copy-out read the all-gather output) and on the group's
    stream (where the op ran). A later tensor whose block overlaps a freed one makes its
    allocating stream (the stream FSDP then writes it on) wait for those events: the GPU
    waits, not the host, as the caching allocator orders a block's reuse after the streams
    recorded on it."""

    def __init__(self, pg):
        self.pool, self.cuda, self.stream = pg._pool, pg._cuda, pg._stream
        self.lock = threading.Lock()
        self.freed = []  # (start, end, events) of blocks whose last users may still run

    def empty(self, size, dtype, device):
        """A tensor of the pool, or None (another device, or no room: the caller stages)."""
        want = torch.device(device)
        if want.type == "cuda" and want.index is None:
            want = torch.device("cuda", torch.cuda.current_device())
        if (self.cuda is None) != (want.type == "cpu") or (self.cuda is not None and want != self.cuda):
            return None
        try:
            t = self.pool._carve(tuple(size), dtype, self._release)
        except conccl.Error:  # no room: deterministic too, the heap being the same on every rank
            return None
        if self.cuda is not None:
            start = t.data_ptr()
            end = start + t.numel() * t.element_size()
            with self.lock:
                waits = [e for s, f, evs in self.freed if s < end and start < f for e in evs]
                self.freed = [(s, f, evs) for s, f, evs in self.freed if not all(e.query() for e in evs)]
            current = torch.cuda.current_stream(self.cuda)
            for e in waits:
                current.wait_event(e)
        return t

    def _release(self, ptr, nbytes):
        if self.cuda is not None:
            try:
                evs = []
                for stream in (torch.cuda.current_stream(self.cuda), self.stream):
                    e = torch.cuda.Event()
                    e.record(stream)
                    evs.append(e)
                with self.lock:
                    self.freed.append((ptr, ptr + max(nbytes, 1), evs))
            except Exception:  # the interpreter is ending: nothing reuses the block any more
                pass
        self.pool._free_quietly(ptr)


_BLOCKS = weakref.WeakKeyDictionary()  # companion group -> _PoolBlocks; goes with the group


def _blocks_of(pg):
    with _LOCK:
        b = _BLOCKS.get(pg)
        if b is None:
            b = _BLOCKS[pg] = _PoolBlocks(pg)
        return b


class _Comm:
    calls = 0  # calls made through this object (per instance once it has made one)
    pool_tensors = 0  # allocate()'s tensors from the companion's pool
    other_tensors = 0  # and from torch's allocator

    def __init__(self, group=None, timeout=None):
        self.group, self.timeout = group, timeout

    def allocate(self, size, *, dtype, device):
        """The buffer FSDP gathers into or reduce-scatters from (and into). For a comm made
        with its group (FSDPAllGather(mesh.get_group())) whose companion has pool room
        (CONCCL_TORCH_POOL_BYTES per rank, set before the companion is made), a tensor of
        that pool, which the op takes with no staging copy; else (no group given, no room
        left) a tensor of torch's allocator, staged. FSDP names no group here, hence the
        group at construction: every rank's comm must be made alike, so that every rank's
        buffers for a call come from the same place."""
        pg = companion_group(self.group, self.timeout) if self.group is not None else None
        t = _blocks_of(pg).empty(size, dtype, device) if getattr(pg, "_pool_bytes", 0) > 0 else None
        if t is None:
            self.other_tensors += 1
            return torch.empty(size, dtype=dtype, device=device)
        self.pool_tensors += 1
        return t

    @staticmethod
    def _finish(work, async_op):
        if async_op:
            return work
        work.wait()  # orders the caller's stream after the op, as a blocking dist call does
        return None


class FSDPAllGather(_Comm, _AllGatherBase):
    """FSDP2's all-gather on the DMA engines (FSDPModule.set_custom_all_gather). `group`:
    the group FSDP will pass (the mesh's), for allocate() to carve from its companion's
    pool; None: buffers of torch's allocator, staged."""

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        pg = companion_group(group, self.timeout)
        work = pg._allgather_base(output_tensor, input_tensor)
        self.calls += 1
        return self._finish(work, async_op)


class FSDPReduceScatter(_Comm, _ReduceScatterBase):
    """FSDP2's reduce-scatter on the DMA engines (FSDPModule.set_custom_reduce_scatter):
    SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM (FSDP's gradient divide factor), reduced in
    rank order (docs/reductions.md). `group` as FSDPAllGather's."""

    def __call__(self, output_tensor, input_tensor, group, op=None, async_op=False):
        from conccl.torch_backend import _Opts
        pg = companion_group(group, self.timeout)
        opts = _Opts(reduceOp=dist.ReduceOp.SUM if op is None else op)
        work = pg._reduce_scatter_base(output_tensor, input_tensor, opts)
        self.calls += 1
        return self._finish(work, async_op)
