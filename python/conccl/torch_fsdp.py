"""FSDP2's all-gather and reduce-scatter on the DMA engines while the model's process
group stays on another backend (NCCL, gloo).

FSDP2 (torch.distributed.fsdp.fully_shard) lets a program replace the two collectives
of its training step: FSDPModule.set_custom_all_gather(comm) and
set_custom_reduce_scatter(comm), where comm follows torch's Comm interface
(torch/distributed/fsdp/_fully_shard/_fsdp_api.py: allocate(size, dtype=, device=) and
__call__(output_tensor, input_tensor, group, [op,] async_op) -> Work | None). These
classes implement it:

    model = fully_shard(model, mesh=mesh)                 # mesh on NCCL, as before
    model.set_custom_all_gather(conccl.torch.FSDPAllGather())
    model.set_custom_reduce_scatter(conccl.torch.FSDPReduceScatter())

so the parameters' all-gathers and the gradients' reduce-scatters move on the copy
engines, beside the step's kernels, and everything else (DDP buckets, the optimizer's
all-reduces, object collectives) stays on the group's own backend.

Each call runs on a "conccl" process group over the same ranks as the group FSDP
passes (its companion): made at the first call on that group, which FSDP makes on
every rank of the group alike, through torch's default store (a prefix of its own),
and kept for the process's life. A group that is already a "conccl" group is used as
it is. The ops are those of that group (conccl/torch_backend.py): ordered on the
current stream (FSDP's all-gather and reduce-scatter streams), tensors of any
allocator staged through the group's window, the Work's wait() ordering the caller's
stream after the op. allocate() gives ordinary tensors of torch's allocator.
"""
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

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
        # The default store outlives its groups; the prefix names the ranks, so each set of
        # ranks puts its own unique id. The entry keeps the store, so its id is not reused.
        prefix = "conccl/companion/" + "-".join(str(r) for r in ranks) + "/"
        pg = ProcessGroupConccl(dist.PrefixStore(prefix, store), ranks.index(me), len(ranks),
                                timeout or _DEFAULT_TIMEOUT, slot=me)
        _COMPANIONS[key] = (store, pg)
        return pg


class _Comm:
    calls = 0  # calls made through this object (per instance once it has made one)

    def allocate(self, size, *, dtype, device):
        """The buffer FSDP gathers into or reduce-scatters from: torch's own allocator (the
        op stages it through the group's window)."""
        return torch.empty(size, dtype=dtype, device=device)

    @staticmethod
    def _finish(work, async_op):
        if async_op:
            return work
        work.wait()  # orders the caller's stream after the op, as a blocking dist call does
        return None


class FSDPAllGather(_Comm, _AllGatherBase):
    """FSDP2's all-gather on the DMA engines (FSDPModule.set_custom_all_gather)."""

    def __init__(self, timeout=None):
        self.timeout = timeout

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        pg = companion_group(group, self.timeout)
        work = pg._allgather_base(output_tensor, input_tensor)
        self.calls += 1
        return self._finish(work, async_op)


class FSDPReduceScatter(_Comm, _ReduceScatterBase):
    """FSDP2's reduce-scatter on the DMA engines (FSDPModule.set_custom_reduce_scatter):
    SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM (FSDP's gradient divide factor), reduced in
    rank order (docs/reductions.md)."""

    def __init__(self, timeout=None):
        self.timeout = timeout

    def __call__(self, output_tensor, input_tensor, group, op=None, async_op=False):
        from conccl.torch_backend import _Opts
        pg = companion_group(group, self.timeout)
        opts = _Opts(reduceOp=dist.ReduceOp.SUM if op is None else op)
        work = pg._reduce_scatter_base(output_tensor, input_tensor, opts)
        self.calls += 1
        return self._finish(work, async_op)
