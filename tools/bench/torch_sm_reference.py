#!/usr/bin/env python3
"""tools/bench/torch_sm_reference.py - the baseline of the FSDP2 step comparison: a
torch.distributed backend "smref" whose collectives run on the SMs (torch's copy and
add kernels over CUDA IPC memory), for processes that share one GPU (where NCCL
refuses to run: one rank per GPU) on the GPU machine.

    torchrun --nproc-per-node 2 tools/bench/torch_sm_reference.py \\
        examples/python/fsdp2_train.py --backend smref [its options]

It registers "smref" and runs the script named first as __main__ (the training
script picks the backend with --backend).

How a collective runs, on the group's stream (after the caller's current stream, as
ProcessGroupNCCL does; the Work's CUDA future orders the waiter after it):
  1. the input is copied into this rank's staging (a CUDA tensor shared with every
     rank of the group through CUDA IPC, torch.multiprocessing.reductions);
  2. a barrier between the GPUs' streams: each rank writes the op's epoch into its
     slot of every rank's flag array and waits until its own array holds the epoch
     in every slot (cuStreamWriteValue32 / cuStreamWaitValue32, CUDA's stream
     memory operations; the write is fenced by default);
  3. all-gather: every rank's staging copied into the output (copy kernels reading
     the peers' memory); reduce-scatter and all-reduce: the slices summed in rank
     order in float32 by add kernels, as ConCCL's reduce orders them;
  4. a second barrier, so that no rank refills its staging while another reads it.
Ops: all_gather_into_tensor, all_gather (lists), reduce_scatter_tensor (SUM, AVG), all_reduce (SUM, AVG),
broadcast, barrier, their coalesced forms: what FSDP2, DDP and the training script use.
"""
import ctypes
import os
import pickle
import runpy
import sys

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.multiprocessing.reductions import reduce_tensor

_cuda = ctypes.CDLL("libcuda.so.1")


def _mem_op(name):
    for n in (name + "_v2", name):
        if hasattr(_cuda, n):
            f = getattr(_cuda, n)
            f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            f.restype = ctypes.c_int
            return f
    raise RuntimeError(f"libcuda has no {name}")


_write32, _wait32 = _mem_op("cuStreamWriteValue32"), _mem_op("cuStreamWaitValue32")
_WAIT_GEQ = 0


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"smref: {what} failed with CUresult {rc}")


class ProcessGroupSmRef(dist.ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._n = rank, size
        self._dev = torch.device("cuda", torch.cuda.current_device())
        self._stream = torch.cuda.Stream(self._dev)
        self._bytes = int(os.environ.get("SMREF_STAGING_BYTES", 256 << 20))
        self._stage = torch.empty(self._bytes, dtype=torch.uint8, device=self._dev)
        self._flags = torch.zeros(size, dtype=torch.int32, device=self._dev)
        self._token = torch.zeros(1, device=self._dev)
        torch.cuda.synchronize()
        store.set(f"smref/{rank}", pickle.dumps((reduce_tensor(self._stage), reduce_tensor(self._flags))))
        self._peer_stage, self._peer_flags = [], []
        for r in range(size):
            if r == rank:
                self._peer_stage.append(self._stage)
                self._peer_flags.append(self._flags)
                continue
            (fs, a_s), (ff, a_f) = pickle.loads(store.get(f"smref/{r}"))
            self._peer_stage.append(fs(*a_s))
            self._peer_flags.append(ff(*a_f))
        self._epoch = 0
        self._depth = 0
        self._name = ""

    def getBackendName(self):
        return "smref"

    def name(self):
        return "smref"

    def _set_group_name(self, name):
        self._name = name

    def getGroupName(self):
        return self._name

    @property
    def group_name(self):
        return self._name

    @property
    def _device_types(self):
        return [torch.device("cuda")]

    def _barrier(self):
        self._epoch += 1
        s = self._stream.cuda_stream
        for r in range(self._n):
            _check(_write32(s, self._peer_flags[r].data_ptr() + 4 * self._rank, self._epoch, 0), "stream write")
        for r in range(self._n):
            _check(_wait32(s, self._flags.data_ptr() + 4 * r, self._epoch, _WAIT_GEQ), "stream wait")

    def _launch(self, tensors, body, result=None):
        if self._depth == 0:
            self._stream.wait_stream(torch.cuda.current_stream(self._dev))
        self._depth += 1
        try:
            with torch.cuda.stream(self._stream):
                body()
                for t in tensors:
                    t.record_stream(self._stream)
                fut = torch.futures.Future(devices=[self._dev])
                fut.set_result(result if result is not None else (list(tensors) or [self._token]))
        finally:
            self._depth -= 1
        return _create_work_from_future(fut)

    def _staged(self, t, nbytes_each):
        if nbytes_each > self._bytes:
            raise RuntimeError(f"smref: {nbytes_each} bytes per rank; SMREF_STAGING_BYTES is {self._bytes}")

    def _peer(self, r, dtype, count):
        return self._peer_stage[r][:count * torch.empty(0, dtype=dtype).element_size()].view(dtype)

    def _gather(self, out, inp):
        k = inp.numel()
        self._staged(inp, k * inp.element_size())
        self._peer(self._rank, inp.dtype, k).copy_(inp.reshape(-1))
        self._barrier()
        flat = out.view(self._n, k)
        for r in range(self._n):
            flat[r].copy_(self._peer(r, inp.dtype, k))
        self._barrier()

    def _reduce(self, out, inp, op, lo, k):
        """out = the reduction of every rank's inp elements [lo, lo + k), rank order, float32."""
        self._staged(inp, inp.numel() * inp.element_size())
        self._peer(self._rank, inp.dtype, inp.numel()).copy_(inp.reshape(-1))
        self._barrier()
        acc = self._peer(0, inp.dtype, inp.numel())[lo:lo + k].float()
        for r in range(1, self._n):
            acc = acc + self._peer(r, inp.dtype, inp.numel())[lo:lo + k].float()
        if op == dist.ReduceOp.AVG:
            acc = acc / self._n
        elif op != dist.ReduceOp.SUM:
            raise RuntimeError(f"smref: ReduceOp {op} (SUM and AVG only)")
        out.reshape(-1).copy_(acc)
        self._barrier()

    def _allgather_base(self, out, inp, opts=None):
        return self._launch([out, inp], lambda: self._gather(out, inp), [out])

    def allgather(self, output_lists, inputs, opts=None):  # DDP checks parameter shapes with it
        def body():
            for outs, inp in zip(output_lists, inputs):
                flat = torch.empty(self._n * inp.numel(), dtype=inp.dtype, device=inp.device)
                self._gather(flat, inp)
                for r, o in enumerate(outs):
                    o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()].view(o.shape))
        return self._launch(list(inputs) + [o for outs in output_lists for o in outs], body, output_lists)

    def allgather_into_tensor_coalesced(self, outs, inps, opts=None):
        return self._launch(list(outs) + list(inps), lambda: [self._gather(o, i) for o, i in zip(outs, inps)], outs)

    def _reduce_scatter_base(self, out, inp, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        k = out.numel()
        return self._launch([out, inp], lambda: self._reduce(out, inp, op, self._rank * k, k), [out])

    def reduce_scatter_tensor_coalesced(self, outs, inps, opts=None):
        return self._launch(list(outs) + list(inps), lambda: [self._reduce_scatter_base(o, i, opts)
                                                              for o, i in zip(outs, inps)], outs)

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return self._launch(tensors, lambda: [self._reduce(t, t, op, 0, t.numel()) for t in tensors], tensors)

    allreduce_coalesced = allreduce

    def broadcast(self, tensors, opts):
        t = tensors[0]

        def body():
            self._staged(t, t.numel() * t.element_size())
            if self._rank == opts.rootRank:
                self._peer(self._rank, t.dtype, t.numel()).copy_(t.reshape(-1))
            self._barrier()
            t.reshape(-1).copy_(self._peer(opts.rootRank, t.dtype, t.numel()))
            self._barrier()
        return self._launch([t], body, [t])

    def barrier(self, opts=None):
        self._launch([], self._barrier)
        self._stream.synchronize()
        return self._launch([], lambda: None)

    def _start_coalescing(self, device=None):
        pass

    def _end_coalescing(self, device=None):
        return self._launch([], lambda: None)

    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced


def register():
    dist.Backend.register_backend("smref", lambda store, rank, size, timeout: ProcessGroupSmRef(
        store, rank, size, timeout), devices=["cuda"])


if __name__ == "__main__":
    register()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
