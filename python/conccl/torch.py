"""conccl.torch - a symmetric memory pool for PyTorch tensors (one process per rank).

    import torch, conccl, conccl.torch
    dev = conccl.Device("nv", process_slot=rank)
    comm = conccl.Communicator(dev, rank=rank, nranks=n, unique_id=uid, gpu=0)
    pool = conccl.torch.SymmetricPool(comm, 256 << 20)   # every rank, the same bytes
    with torch.cuda.use_mem_pool(pool.mempool):           # every rank, the same allocations
        inp = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        out = torch.empty(n << 20, dtype=torch.uint8, device="cuda")
    comm.all_gather_into_tensor(out, inp)                  # on the current stream, no message per call

A SymmetricPool is a heap of the C API (conccl_heap_create): one buffer per
rank, registered once as a window of the communicator, carved by a
deterministic allocator (first fit, 512-byte aligned), so that the same
allocations and frees on every rank give tensors at the same offsets on every
rank, as NVSHMEM's and torch's SymmetricMemory heaps do. Collectives on such
tensors go through the window: no registration and no message between the
ranks per call.

Which form is fast:
  - fast: tensors of the pool, at the same offsets on every rank. Allocate
    them inside `with torch.cuda.use_mem_pool(pool.mempool)` (PyTorch >= 2.5
    with CUDA: its caching allocator carves them out of segments the heap
    gives it) or with pool.empty(...) (any PyTorch; the emulator too). Every
    rank must make the same allocations and frees in the same order (what a
    program that runs the same code on every rank does), so allocate the
    communication tensors in the pool and leave the rest of the program on
    PyTorch's own allocator.
  - slower but correct: any other tensor (PyTorch's default allocator, plain
    cudaMalloc memory) while the communicator has a pool: the call stages it
    through a staging area of the pool, on the same stream: the input is
    copied in, the collective runs through the window, the output is copied
    out. That costs a device copy of the input and of the output per call.
    Every rank must use the same form for a call (all pool tensors, or all
    staged), so that the offsets agree.

The PyTorch allocator functions (conccl_heap_torch_alloc/free) take no user
argument, so they serve the heap made current: one pool per process can back
a torch.cuda.MemPool at a time (SymmetricPool.mempool makes its heap current).
"""
import contextlib
import ctypes
import sys
import weakref

import conccl
from conccl import Buffer, Error, _Buffer, _check, _integer, _sig, _sz, _u64, _vp

__all__ = ["SymmetricPool", "pool_of", "group_pool", "FSDPAllGather", "FSDPReduceScatter", "companion_group"]

_P = ctypes.POINTER
_int = ctypes.c_int
_ALIGN = 512


class _HeapInfo(ctypes.Structure):
    _fields_ = [("base", _u64), ("bytes", _sz), ("used", _sz), ("largest_free", _sz), ("allocations", _sz),
                ("cuda_device", _int), ("buffer", _Buffer)]


try:
    _heap_create = _sig("conccl_heap_create", _int, _vp, _sz, _P(_vp))
    _heap_destroy = _sig("conccl_heap_destroy", _int, _vp)
    _heap_alloc = _sig("conccl_heap_alloc", _int, _vp, _sz, _P(_u64))
    _heap_free = _sig("conccl_heap_free", _int, _vp, _u64)
    _heap_buffer = _sig("conccl_heap_buffer", _int, _vp, _u64, _sz, _P(_Buffer))
    _heap_info = _sig("conccl_heap_get_info", _int, _vp, _P(_HeapInfo))
    _heap_make_current = _sig("conccl_heap_make_current", _int, _vp)
    _heap_torch_error = _sig("conccl_heap_torch_error", _int, ctypes.c_char_p, _sz, _P(_sz))
except AttributeError as e:  # a libconccl older than the heaps
    raise ImportError(f"conccl.torch: the loaded ConCCL library has no symmetric heaps ({e}): use a newer "
                      "libconccl.so (CONCCL_LIBRARY)") from None

# The pool of each communicator (by id: the pool holds its communicator), for
# the tensor calls' staging (Communicator._tensor_call asks _staged_call).
_pools = weakref.WeakValueDictionary()
# The pool whose heap backs a torch.cuda.MemPool (the heap made current).
_mempool_owner = [None]
_allocator = [None]  # the one CUDAPluggableAllocator of this process


def _torch():
    try:
        import torch
    except ImportError:
        raise Error("unavailable", "conccl.torch needs PyTorch (pip install torch; Debian: apt-get install "
                                   "python3-torch)") from None
    return torch


def pool_of(comm):
    """The SymmetricPool of `comm` that its tensor calls stage through, or None."""
    p = _pools.get(id(comm))
    return p if p is not None and p.comm is comm and p._h else None


def _nbytes(t):
    return t.numel() * t.element_size()


def _span(t):
    """(first byte, bytes) of the memory the tensor's elements lie in."""
    if t.numel() == 0:
        return t.data_ptr(), 0
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return t.data_ptr(), (last + 1) * t.element_size()


class _Area:
    """A staging area: one heap allocation and a uint8 tensor over it."""

    def __init__(self, ptr, nbytes, tensor):
        self.ptr, self.nbytes, self.tensor = ptr, nbytes, tensor


def end_communicator(comm, stream, why):
    """Ends a communicator whose pool is about to be dropped, with no collective step, so
    that it may run when its owner is collected: `stream` (CUDA, or None) finishes its
    work, then the communicator is destroyed (it waits for its calls in flight), so that
    the SymmetricPool dropped after it frees its heap at once (SymmetricPool.__del__).
    A failed context or calls past the timeout do not stop it: the owner is going."""
    if stream is not None:
        try:
            stream.synchronize()
        except Exception:  # a failed context: the destroy below still runs
            pass
    if comm is not None:
        try:
            comm._destroy(why)
        except conccl.Error:
            pass  # calls still in flight past the timeout: the communicator is gone either way


class SymmetricPool:
    """A heap of `nbytes` per rank in one window of `comm` (collective: every rank,
    with the same nbytes, in the same order as its other window registrations).

    .mempool         a torch.cuda.MemPool over the heap (nv backend, PyTorch >= 2.5)
    .empty(...)      a tensor carved from the heap directly (any PyTorch; emu: CPU tensors)
    .owns(t)         whether tensor t lies in the heap
    .buffer(t)       the conccl.Buffer of t's bytes (for Communicator.all_gather & co.)
    .stats()         bytes, used, largest free range, allocations
    .close()         collective: deregisters the window and frees the memory
    """

    _h = None

    def __init__(self, comm, nbytes):
        if not isinstance(comm, conccl.Communicator):
            raise Error("invalid_argument", f"comm must be a conccl.Communicator, not {type(comm).__name__}")
        nbytes = _integer("nbytes", nbytes, "size_t")
        h = _vp()
        _check(_heap_create(comm._handle(), nbytes, ctypes.byref(h)))
        self._h = h
        self.comm = comm
        self.device = comm._device
        info = self._info()
        self.base = info.base
        self.nbytes = info.bytes
        self.cuda_device = info.cuda_device if info.cuda_device >= 0 else None
        raw = _Buffer.from_buffer_copy(info.buffer)
        # The whole heap as a Buffer of the device: the tensor calls find pool
        # tensors inside it (Device._tensor_buffer) and pass their sub-range.
        self._whole = _HeapBuffer(self.device, raw, self.base if self.cuda_device is not None else None)
        self._host = raw.host  # emu: the CPU's view of the heap (CPU tensors over it)
        self._areas = {}  # stream key -> _Area
        self._mempool = None
        _pools[id(comm)] = self

    # ---- the heap ----
    def _handle(self):
        if not self._h:
            raise Error("invalid_argument", "this SymmetricPool was closed")
        return self._h

    def _info(self):
        info = _HeapInfo()
        _check(_heap_info(self._handle(), ctypes.byref(info)))
        return info

    def stats(self):
        """{"bytes", "used", "largest_free", "allocations"} of this rank's heap."""
        i = self._info()
        return {"bytes": i.bytes, "used": i.used, "largest_free": i.largest_free, "allocations": i.allocations}

    def _alloc(self, nbytes):
        p = _u64()
        _check(_heap_alloc(self._handle(), _integer("nbytes", nbytes, "size_t"), ctypes.byref(p)))
        return p.value

    def _free(self, ptr):
        if self._h:  # after close() the heap's memory is gone already
            _check(_heap_free(self._h, ptr))

    @staticmethod
    def last_error():
        """The message of the latest failed allocation or free through PyTorch's allocator
        (conccl_heap_torch_error; "" if none failed): why a MemPool allocation ran out."""
        need = _sz()
        _check(_heap_torch_error(None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        _check(_heap_torch_error(buf, need.value, ctypes.byref(need)))
        return buf.value.decode()

    # ---- tensors ----
    def _ptr(self, t):
        """The heap pointer of tensor t's first byte (CUDA pointer on nv, va on emu), or None
        when t cannot lie in the heap (another device type)."""
        if self.cuda_device is not None:
            return t.data_ptr() if getattr(t, "is_cuda", False) else None
        if t.device.type != "cpu" or not self._host:
            return None
        return t.data_ptr() - self._host + self.base

    def owns(self, tensor):
        """Whether every element of `tensor` lies in this rank's heap."""
        if not conccl._is_tensor(tensor) or not self._h:
            return False
        p = self._ptr(tensor)
        if p is None:
            return False
        start, span = _span(tensor)
        p += start - tensor.data_ptr()
        return self.base <= p and p + span <= self.base + self.nbytes

    def buffer(self, tensor):
        """The conccl.Buffer of a contiguous tensor of this pool (conccl_heap_buffer): a part
        of the heap's window, for the Buffer calls (Communicator.all_gather, ...). It is not
        freed on its own and stops working when the pool is closed."""
        if not conccl._is_tensor(tensor):
            raise Error("invalid_argument", f"buffer: give a torch tensor, not {type(tensor).__name__}")
        if not tensor.is_contiguous():
            raise Error("invalid_argument", "buffer: the tensor is not contiguous (a Buffer is one range of bytes): "
                                            "call .contiguous() on a tensor of the pool")
        if not self.owns(tensor) or _nbytes(tensor) == 0:
            raise Error("invalid_argument", "buffer: the tensor does not lie in this pool's heap (allocate it inside "
                                            "torch.cuda.use_mem_pool(pool.mempool), or with pool.empty)")
        ptr = self._ptr(tensor)
        raw = _Buffer()
        _check(_heap_buffer(self._handle(), ptr, _nbytes(tensor), ctypes.byref(raw)))
        b = Buffer(self.device, raw, ptr if self.cuda_device is not None else None)
        b._parent = self._whole
        return b

    def empty(self, *shape, dtype=None):
        """A tensor carved from the heap directly, without PyTorch's allocator (any PyTorch
        version; on the emulator a CPU tensor over the heap's memory). Its block goes back
        to the heap when its storage dies. Freed memory may be reused by the next
        allocation at once: use such tensors on one stream (or synchronize), as with
        PyTorch's own caching allocator."""
        torch = _torch()
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        return self._carve(shape, dtype or torch.uint8, self._free_quietly)

    def _carve(self, shape, dtype, release):
        """A tensor of `shape` and `dtype` over a new block of the heap; release(ptr, nbytes)
        when its storage dies (conccl.Error when the heap has no room)."""
        torch = _torch()
        elem = torch.empty((), dtype=dtype).element_size()
        n = 1
        for s in shape:
            n *= _integer("shape", s, "size_t")
        nbytes = n * elem
        ptr = self._alloc(nbytes)
        try:
            v = self._whole.view(ptr - self.base, max(nbytes, 1))
            # The block goes back to the heap when the consumer's tensor lets go of the
            # view (its DLPack deleter), which holds the pool alive until then.
            weakref.finalize(v, release, ptr, nbytes)
            t = torch.from_dlpack(v)
        except BaseException:
            self._free_quietly(ptr)
            raise
        return t[:nbytes].view(dtype).view(tuple(shape))

    def _free_quietly(self, ptr, nbytes=0):
        try:
            self._free(ptr)
        except Error:
            pass

    # ---- torch.cuda.MemPool ----
    @property
    def mempool(self):
        """A torch.cuda.MemPool whose allocations come from this heap (made once; makes the
        heap current for PyTorch's pluggable allocator). Needs the nv backend and a PyTorch
        with CUDA and torch.cuda.MemPool (2.5 or later)."""
        if self._mempool is not None:
            return self._mempool
        self._handle()
        torch = _torch()
        missing = [n for n, ok in (("CUDA", torch.cuda.is_available()),
                                   ("torch.cuda.MemPool", hasattr(torch.cuda, "MemPool")),
                                   ("torch.cuda.use_mem_pool", hasattr(torch.cuda, "use_mem_pool")),
                                   ("torch.cuda.memory.CUDAPluggableAllocator",
                                    hasattr(getattr(torch.cuda, "memory", None), "CUDAPluggableAllocator"))) if not ok]
        if missing:
            raise Error("unavailable", f"SymmetricPool.mempool needs PyTorch with {', '.join(missing)} (this is "
                                       f"torch {torch.__version__}; MemPool came in 2.5): use pool.empty(...) for "
                                       "pool tensors instead")
        if self.cuda_device is None:
            raise Error("unavailable", "SymmetricPool.mempool: this heap is not CUDA memory (the device's backend is "
                                       "not 'nv'): use pool.empty(...)")
        owner = _mempool_owner[0]() if _mempool_owner[0] is not None else None
        if owner is not None and owner is not self and owner._mempool is not None and owner._h:
            raise Error("invalid_argument", "another SymmetricPool of this process backs a torch.cuda.MemPool already: "
                                            "PyTorch's pluggable allocator has no user argument, so one heap per "
                                            "process serves it (close the other pool first)")
        if _allocator[0] is None:
            path = getattr(conccl.library, "_name", None)
            _allocator[0] = torch.cuda.memory.CUDAPluggableAllocator(path, "conccl_heap_torch_alloc",
                                                                     "conccl_heap_torch_free")
        _check(_heap_make_current(self._handle()))
        self._mempool = torch.cuda.MemPool(_allocator[0].allocator())
        _mempool_owner[0] = weakref.ref(self)
        return self._mempool

    # ---- staging ----
    def _area(self, key, nbytes, synchronize):
        """The staging area of stream `key`, at least nbytes. Growing it (every rank
        alike, as the calls are alike) waits for the stream's work on the old one."""
        a = self._areas.get(key)
        if a is not None and a.nbytes >= nbytes:
            return a
        size = max(nbytes, 2 * a.nbytes if a is not None else 0, 1 << 16)
        size = (size + _ALIGN - 1) // _ALIGN * _ALIGN
        if a is not None:
            synchronize()
            del self._areas[key]
            a.tensor = None
            self._free(a.ptr)
        ptr = self._alloc(size)
        try:
            t = _torch().from_dlpack(self._whole.view(ptr - self.base, size))
        except BaseException:
            self._free_quietly(ptr)
            raise
        a = self._areas[key] = _Area(ptr, size, t)
        return a

    # ---- lifetime ----
    def close(self):
        """Collective (every rank, in the same order as its window calls): deregisters the
        heap's window and frees its memory. Tensors of the pool must be dead by then: drop
        them (and the MemPool) first. If the library refuses (calls on the window still in
        flight past the communicator's timeout), the pool stays open: close() again."""
        if not self._h:
            return
        had_mempool = self._mempool is not None
        if self._areas or had_mempool:
            torch = _torch()
            if self.cuda_device is not None and torch.cuda.is_available():
                torch.cuda.synchronize()  # staging copies and pool tensors' work done
        self._mempool = None
        if had_mempool:
            # PyTorch hands the MemPool's cached segments back (to
            # conccl_heap_torch_free) while the heap still lives.
            _torch().cuda.empty_cache()
        for a in self._areas.values():
            a.tensor = None  # their blocks go with the heap
        self._areas.clear()
        owner = _mempool_owner[0]() if _mempool_owner[0] is not None else None
        if owner is self:
            _mempool_owner[0] = None
            _heap_make_current(None)
        _check(_heap_destroy(self._h))
        self._h = None
        if _pools.get(id(self.comm)) is self:
            del _pools[id(self.comm)]
        self._whole._invalidate("is gone: its SymmetricPool was closed")

    def __del__(self):
        # Collected: no tensor carved from the heap is alive (each holds the pool). Once
        # the communicator is gone, destroying the heap frees its memory with no
        # collective step. While it lives, freeing would deregister the window, which is
        # collective and cannot run inside a collection: the memory then stays until
        # close() or the device's close. A MemPool's blocks are PyTorch's to hand back.
        if not self._h or self._mempool is not None or sys.is_finalizing():
            return
        if getattr(self.comm, "_h", None):
            return
        try:
            self.close()  # no collective step: the communicator is gone
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _HeapBuffer(Buffer):
    """The whole heap as a Buffer: found by the tensor calls; never freed as a Buffer."""

    def free(self):
        raise Error("invalid_argument", "this Buffer is a SymmetricPool's heap: close the pool instead")


def _one(x):
    """The tensor of a one-process-per-rank call (a tensor, or a list of one), or None."""
    if isinstance(x, (list, tuple)):
        x = x[0] if len(x) == 1 else None
    return x if conccl._is_tensor(x) else None


def _torch_stream(torch, stream):
    if stream is None:
        return torch.cuda.current_stream()
    if isinstance(stream, torch.cuda.Stream):
        return stream
    h = _integer("stream", getattr(stream, "cuda_stream", stream), "uint64")
    return torch.cuda.ExternalStream(h) if h else torch.cuda.default_stream()


def _staged_call(comm, op, outputs, inputs, stream, splits=(None, None), src=None):
    """Communicator._tensor_call's hook: when `comm` has a pool and a tensor of the call
    is not a contiguous tensor of it, run the call through the pool's staging area on
    the call's stream (copy in, collective through the window, copy out) and return
    True; else False (the call goes on as it came)."""
    pool = pool_of(comm)
    if pool is None or comm.rank < 0:
        return False
    o, i = _one(outputs), _one(inputs)
    if o is None or i is None:
        return False  # the call itself names what is wrong

    def fast(t):
        return t.is_contiguous() and pool.owns(t)

    if fast(o) and fast(i):
        return False
    torch = _torch()
    if i.dtype != o.dtype:
        return False  # refused by the call, naming both
    cuda = getattr(o, "is_cuda", False)
    if cuda:
        s = _torch_stream(torch, stream)
        key, sync, ctx = s.cuda_stream, s.synchronize, torch.cuda.stream(s)
    else:
        key, sync, ctx = None, (lambda: None), contextlib.nullcontext()
    same = o is i  # broadcast: one tensor, in place
    stage_in = not same and not fast(i)
    stage_out = not fast(o)
    ib, ob = _nbytes(i), _nbytes(o)
    in_at = 0
    out_at = (ib + _ALIGN - 1) // _ALIGN * _ALIGN if stage_in else 0
    area = pool._area(key, out_at + ob if stage_out else ib, sync)

    def part(at, t):
        return area.tensor[at:at + _nbytes(t)].view(t.dtype).view(t.shape)

    si = part(in_at, i) if stage_in else i
    so = part(out_at, o) if stage_out else o
    if same:
        si = so
    with ctx:
        if stage_in:
            si.copy_(i)
        elif same and stage_out and (op != "broadcast" or comm.rank == src):
            so.copy_(o)  # the root's data in; other ranks' is not read
        comm._tensor_call(op, so, si, stream, splits, src)
        if stage_out:
            o.copy_(so)
    return True


def _staged_rooted(comm, op, side, root_side, root, stream):
    """Communicator.gather / scatter's hook (one process per rank, a pool on `comm`);
    returns True when it made the call. This rank's tensor goes through the pool's staging
    area when it is not a contiguous tensor of the pool. The root's side (its list, or one
    tensor) goes through the area's second part on every rank, since the other ranks must
    name where it lies and cannot see the root's arguments, unless this rank passes a
    contiguous pool tensor for it: then every rank must, at the same offset (the symmetric
    form, written in place; the call refuses ranks that disagree). Every rank takes the
    same area (its tensor's bytes, then n times them), so that the heap stays alike."""
    pool = pool_of(comm)
    if pool is None or comm.rank < 0 or not isinstance(root, int) or not 0 <= root < comm.size:
        return False
    t = _one(side)
    if t is None:
        return False  # the call itself names what is wrong
    n, b, at_root = comm.size, _nbytes(t), comm.rank == root
    listed = isinstance(root_side, (list, tuple)) and len(root_side) > 0
    if at_root and listed and (len(root_side) != n or not all(
            conccl._is_tensor(x) and x.dtype == t.dtype and _nbytes(x) == b for x in root_side)):
        return False
    if at_root and conccl._is_tensor(root_side) and (root_side.dtype != t.dtype or _nbytes(root_side) != n * b):
        return False
    if not at_root and listed:
        return False

    def fast(x):
        return x.is_contiguous() and pool.owns(x)

    torch = _torch()
    if getattr(t, "is_cuda", False):
        s = _torch_stream(torch, stream)
        key, sync, ctx = s.cuda_stream, s.synchronize, torch.cuda.stream(s)
    else:
        key, sync, ctx = None, (lambda: None), contextlib.nullcontext()
    root_at = (b + _ALIGN - 1) // _ALIGN * _ALIGN
    area = pool._area(key, root_at + n * b, sync)
    stage_side = not fast(t)
    symmetric = conccl._is_tensor(root_side) and fast(root_side)
    if not stage_side and symmetric:
        return False
    si = area.tensor[:b].view(t.dtype).view(t.shape) if stage_side else t
    sr = root_side if symmetric else area.tensor[root_at:root_at + n * b].view(t.dtype)
    stage_root = at_root and not symmetric
    with ctx:
        if stage_side and op == "gather":
            si.copy_(t)
        if stage_root and op == "scatter":
            conccl._rows_in(sr.view(n, -1), root_side)
        comm._rooted_tensors(op, si, sr, root, stream=stream)
        if stage_side and op == "scatter":
            t.copy_(si)
        if stage_root and op == "gather":
            conccl._rows_out(sr.view(n, -1), root_side)
    return True


# torch.distributed: `import conccl.torch` makes init_process_group("conccl")
# available (conccl/torch_backend.py, docs/torch-backend.md).
def _register_backend():
    try:
        import torch.distributed as dist
    except ImportError:  # torch without distributed support: the pool still works
        return
    if not dist.is_available():
        return
    from conccl import torch_backend
    torch_backend.register()


_register_backend()


def group_pool(group=None):
    """The SymmetricPool of a "conccl" torch.distributed process group (the default group
    when None): tensors allocated in it alike on every rank skip the group's staging
    copies (conccl/torch_backend.py, group_pool; docs/torch-backend.md)."""
    from conccl import torch_backend
    return torch_backend.group_pool(group)


def __getattr__(name):
    """FSDPAllGather, FSDPReduceScatter and companion_group (conccl/torch_fsdp.py): FSDP2's
    all-gather and reduce-scatter on the DMA engines while the group is on another
    backend; loaded on first use, since they need torch.distributed."""
    if name in ("FSDPAllGather", "FSDPReduceScatter", "companion_group"):
        from conccl import torch_fsdp
        return getattr(torch_fsdp, name)
    raise AttributeError(f"module 'conccl.torch' has no attribute {name!r}")
