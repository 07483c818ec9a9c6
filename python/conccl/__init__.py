"""conccl - Python bindings for ConCCL over its C API (include/conccl/conccl.h).

Pure ctypes: nothing to compile. The shared library is found through
$CONCCL_LIBRARY (a path), else as libconccl.so.0 on the loader's path
(an installed ConCCL: `cmake --install build --prefix P`, then
LD_LIBRARY_PATH=P/lib when P is not a system prefix).

    import conccl
    with conccl.Device("emu", preset="mi300x") as dev:
        comm = conccl.Communicator(dev, range(dev.gpu_count))
        send = [dev.alloc(r, 1 << 20) for r in range(dev.gpu_count)]
        recv = [dev.alloc(r, (1 << 20) * dev.gpu_count) for r in range(dev.gpu_count)]
        comm.all_gather(send, recv, 1 << 20)

Every failure raises conccl.Error carrying the library's status and message.
Buffers whose memory the CPU sees (emulated GPUs, host memory) have zero-copy
views: Buffer.memoryview() and Buffer.numpy(dtype) (numpy optional).

Every buffer speaks DLPack (Buffer.__dlpack__): numpy.from_dlpack(buf) on
CPU-visible memory, torch.from_dlpack(buf) on CUDA memory of the nv backend
(Device.alloc_cuda). PyTorch tensors go into collectives directly:
Communicator.all_gather_into_tensor(outs, inps) registers the tensors' CUDA
memory (PyTorch needs PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, whose
memory the copy engines can map) and orders the all-gather on the current
CUDA stream: the copies start when the stream's earlier work is done, and
the stream's later work sees the data; the call returns at once.
"""
import atexit
import ctypes
import ctypes.util
import json
import os
import weakref

__all__ = ["Error", "Device", "Buffer", "Signal", "Queue", "Communicator", "Plan", "library", "version",
           "CU_STREAM_LEGACY"]

_u64 = ctypes.c_uint64
_sz = ctypes.c_size_t
_int = ctypes.c_int
_vp = ctypes.c_void_p
_cp = ctypes.c_char_p

DEVICE, HOST, CUDA = 0, 1, 2
CU_STREAM_LEGACY = 1  # cuda.h's handle of the legacy default stream (a stream of 0 means "no stream" here)
OPS = {"p2p": 0, "broadcast": 1, "gather": 2, "scatter": 3, "all_gather": 4, "all_to_all": 5}
VARIANTS = {"auto": 0, "pcpy": 1, "bcst": 2, "b2b": 3, "swap": 4, "fanout": 5, "chain": 6, "striped": 7, "single": 8}


class _Buffer(ctypes.Structure):
    _fields_ = [("va", _u64), ("host", _vp), ("size", _sz), ("gpu", _int), ("kind", _int), ("id", _u64)]


class _DeviceOptions(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("backend", _cp), ("preset", _cp), ("gpus", _int), ("engines", _int),
                ("gen", _cp), ("memory_per_gpu", _sz), ("process_slot", _int)]


class _UniqueId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 128)]


class _CommOptions(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("ring_bytes", _sz), ("loopback", _int), ("engines", ctypes.POINTER(_int)),
                ("num_engines", _int), ("timeout_ms", ctypes.c_uint32), ("queues", _int)]


class _CollArgs(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("op", _int), ("variant", _int), ("bytes", _u64), ("root", _int),
                ("peer", _int), ("send", ctypes.POINTER(_Buffer)), ("nsend", _int),
                ("recv", ctypes.POINTER(_Buffer)), ("nrecv", _int), ("prelaunch", _int), ("timestamps", _int)]


def _load():
    path = os.environ.get("CONCCL_LIBRARY")
    names = [path] if path else ["libconccl.so.0", "libconccl.so", ctypes.util.find_library("conccl")]
    errors = []
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("conccl: cannot load the ConCCL shared library (" + "; ".join(errors) +
                      "). Install ConCCL (cmake --install build --prefix P; LD_LIBRARY_PATH=P/lib) or set "
                      "CONCCL_LIBRARY to the path of libconccl.so.")


library = _load()


def _sig(name, res, *args):
    f = getattr(library, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_P = ctypes.POINTER
_status = _int
_last_error = _sig("conccl_last_error", _cp)
_status_name = _sig("conccl_status_name", _cp, _int)
_version = _sig("conccl_version", _cp)
_dev_open = _sig("conccl_device_open", _status, _P(_DeviceOptions), _P(_vp))
_dev_close = _sig("conccl_device_close", None, _vp)
_dev_gpus = _sig("conccl_device_gpu_count", _status, _vp, _P(_int))
_dev_engines = _sig("conccl_device_engines", _status, _vp, _int, _P(_int), _int, _P(_int))
_dev_topo = _sig("conccl_device_topology_json", _status, _vp, _cp, _sz, _P(_sz))
_buf_alloc = _sig("conccl_buffer_alloc", _status, _vp, _int, _sz, _int, _P(_Buffer))
_buf_free = _sig("conccl_buffer_free", _status, _vp, _P(_Buffer))
_buf_up = _sig("conccl_buffer_upload", _status, _vp, _P(_Buffer), _sz, _vp, _sz, ctypes.c_uint32)
_buf_down = _sig("conccl_buffer_download", _status, _vp, _vp, _P(_Buffer), _sz, _sz, ctypes.c_uint32)
_sig_create = _sig("conccl_signal_create", _status, _vp, _u64, _P(_vp))
_sig_destroy = _sig("conccl_signal_destroy", None, _vp)
_sig_value = _sig("conccl_signal_value", _u64, _vp)
_sig_add = _sig("conccl_signal_add", None, _vp, _u64)
_sig_wait = _sig("conccl_signal_wait", _status, _vp, _u64, ctypes.c_uint32)
_sig_addr = _sig("conccl_signal_address", _u64, _vp)
_q_create = _sig("conccl_queue_create", _status, _vp, _int, _int, _vp, _P(_vp))
_q_destroy = _sig("conccl_queue_destroy", None, _vp)
_q_copy = _sig("conccl_queue_copy", _status, _vp, _u64, _u64, _u64)
_q_fill = _sig("conccl_queue_fill", _status, _vp, _u64, ctypes.c_uint32, _u64)
_q_sadd = _sig("conccl_queue_signal_add", _status, _vp, _vp, _u64)
_q_swait = _sig("conccl_queue_wait_signal", _status, _vp, _vp, _u64)
_q_submit = _sig("conccl_queue_submit", _status, _vp, ctypes.c_uint32, _P(_u64))
_q_wait = _sig("conccl_queue_wait", _status, _vp, _u64, ctypes.c_uint32)
_q_completed = _sig("conccl_queue_completed", _u64, _vp)
_comm_create = _sig("conccl_comm_create", _status, _vp, _P(_int), _int, _P(_CommOptions), _P(_vp))
_comm_create_rank = _sig("conccl_comm_create_rank", _status, _vp, _int, _int, _P(_UniqueId), _int, _P(_CommOptions),
                         _P(_vp))
_comm_rank = _sig("conccl_comm_rank", _int, _vp)
_comm_cached_plans = _sig("conccl_comm_cached_plans", _sz, _vp)
_get_uid = _sig("conccl_get_unique_id", _status, _P(_UniqueId))
_uid_to_string = _sig("conccl_unique_id_to_string", _status, _P(_UniqueId), _cp, _sz)
_uid_from_string = _sig("conccl_unique_id_from_string", _status, _cp, _P(_UniqueId))
_comm_destroy = _sig("conccl_comm_destroy", None, _vp)
_comm_size = _sig("conccl_comm_size", _int, _vp)
_plan_create = _sig("conccl_plan_create", _status, _vp, _P(_CollArgs), _P(_vp))
_plan_destroy = _sig("conccl_plan_destroy", None, _vp)
_plan_launch = _sig("conccl_plan_launch", _status, _vp, ctypes.c_uint32)
_plan_prelaunch = _sig("conccl_plan_prelaunch", _status, _vp, ctypes.c_uint32)
_plan_release = _sig("conccl_plan_release", _status, _vp)
_plan_wait = _sig("conccl_plan_wait", _status, _vp, ctypes.c_uint32)
_plan_variant = _sig("conccl_plan_variant", _int, _vp)
_variant_name = _sig("conccl_variant_name", _cp, _int)
_plan_completion = _sig("conccl_plan_completion", _status, _vp, _int, _P(_u64), _P(_u64))
_all_gather = _sig("conccl_all_gather", _status, _P(_Buffer), _P(_Buffer), _sz, _vp, _vp)
_all_to_all = _sig("conccl_all_to_all", _status, _P(_Buffer), _P(_Buffer), _sz, _vp, _vp)
_broadcast = _sig("conccl_broadcast", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _vp, _vp)
_buf_alloc_cuda = _sig("conccl_buffer_alloc_cuda", _status, _vp, _int, _sz, _P(_Buffer))
_buf_cuda_ptr = _sig("conccl_buffer_cuda_pointer", _status, _vp, _P(_Buffer), _P(ctypes.c_uint64))
_buf_reg_cuda = _sig("conccl_buffer_register_cuda", _status, _vp, _int, _u64, _sz, _P(_Buffer))
_buf_unreg_cuda = _sig("conccl_buffer_unregister_cuda", _status, _vp, _P(_Buffer))
_dev_cuda_ordinal = _sig("conccl_device_cuda_ordinal", _status, _vp, _int, _P(_int))


class _Store(ctypes.Structure):
    _fields_ = [("address", _u64), ("value", _u64)]


_plan_release_stores = _sig("conccl_plan_release_by_stores", _status, _vp, _P(_Store), _int, _P(_int))
_plan_consumed_store = _sig("conccl_plan_consumed_store", _status, _vp, _P(_Store))
_plan_enqueue_stream = _sig("conccl_plan_enqueue_on_stream", _status, _vp, _vp, ctypes.c_uint32)


# ---- DLPack (dlpack.h, v0.8 ABI: DLManagedTensor in a "dltensor" capsule) ----
_kDLCPU, _kDLCUDA = 1, 2


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", _int), ("device_id", _int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", _vp), ("device", _DLDevice), ("ndim", _int), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", _u64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", _vp), ("deleter", _DLDeleter)]
_dl_alive = {}  # manager_ctx -> (managed tensor, shape, buffer): kept until the consumer's deleter runs
_dl_next = [1]
_DLTENSOR = b"dltensor"


@_DLDeleter
def _dl_delete(managed):
    _dl_alive.pop(managed.contents.manager_ctx or 0, None)


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [_vp, _cp, _vp]
_PyCapsule_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = _int
_PyCapsule_IsValid.argtypes = [_vp, _cp]  # raw PyObject*: the capsule is being destroyed
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = _vp
_PyCapsule_GetPointer.argtypes = [_vp, _cp]
# The destructor gets a PyObject* whose refcount is already 0: take it as a raw
# pointer (a py_object argument would resurrect and free it a second time).
_CapsuleDestructor = ctypes.CFUNCTYPE(None, _vp)


@_CapsuleDestructor
def _capsule_destructor(capsule):
    # A capsule never consumed (still named "dltensor") frees its tensor; a
    # consumer renames it "used_dltensor" and calls the deleter itself.
    if _PyCapsule_IsValid(capsule, _DLTENSOR):
        p = _PyCapsule_GetPointer(capsule, _DLTENSOR)
        m = ctypes.cast(p, ctypes.POINTER(_DLManagedTensor))
        _dl_alive.pop(m.contents.manager_ctx or 0, None)


class Error(Exception):
    """A ConCCL error: .status ("invalid_argument", "timeout", ...) and the library's message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _check(rc):
    if rc != 0:
        raise Error(_status_name(rc).decode(), _last_error().decode())


def version():
    return _version().decode()


class Buffer:
    """Memory engines can address: .va goes into commands; .host is the CPU mapping or None."""

    def __init__(self, device, raw, cuda_ptr=None):
        self._device = device
        self._raw = raw
        self._cuda_ptr = cuda_ptr

    va = property(lambda self: self._raw.va)
    # CUDA's pointer to CUDA memory (alloc_cuda, register_cuda), for CUDA and
    # DLPack; it differs from va on a device with a process_slot, where the
    # engines see the memory at an address in the slot's window.
    cuda_ptr = property(lambda self: self._cuda_ptr)
    size = property(lambda self: self._raw.size)
    gpu = property(lambda self: self._raw.gpu)
    host = property(lambda self: self._raw.host)

    def upload(self, data, offset=0, timeout_ms=10000):
        mv = memoryview(data).cast("B")
        src = (ctypes.c_char * len(mv)).from_buffer_copy(mv) if mv.readonly else (ctypes.c_char * len(mv)).from_buffer(mv)
        _check(_buf_up(self._device._h, ctypes.byref(self._raw), offset, ctypes.addressof(src), len(mv), timeout_ms))

    def download(self, nbytes=None, offset=0, timeout_ms=10000):
        n = self.size - offset if nbytes is None else nbytes
        out = ctypes.create_string_buffer(n)
        _check(_buf_down(self._device._h, out, ctypes.byref(self._raw), offset, n, timeout_ms))
        return out.raw

    kind = property(lambda self: self._raw.kind)

    def __dlpack_device__(self):
        """(kDLCUDA, CUDA ordinal) for CUDA memory, (kDLCPU, 0) for CPU-visible memory."""
        if self._raw.kind == CUDA:
            return (_kDLCUDA, self._device.cuda_ordinal(self.gpu))
        if not self.host:
            raise Error("unavailable", "this buffer is neither CPU-visible nor CUDA memory: no DLPack view "
                                       "(on the nv backend allocate with Device.alloc_cuda)")
        return (_kDLCPU, 0)

    def __dlpack__(self, stream=None, **kw):
        """A DLPack capsule viewing the whole buffer as uint8[size], zero-copy. The
        buffer must outlive the consumer's tensor (free it only after)."""
        dev_type, dev_id = self.__dlpack_device__()
        m = _DLManagedTensor()
        shape = (ctypes.c_int64 * 1)(self.size)
        m.dl_tensor.data = self._cuda_ptr if dev_type == _kDLCUDA else self.host
        m.dl_tensor.device = _DLDevice(dev_type, dev_id)
        m.dl_tensor.ndim = 1
        m.dl_tensor.dtype = _DLDataType(1, 8, 1)  # kDLUInt, 8 bits
        m.dl_tensor.shape = shape
        m.dl_tensor.strides = None
        m.dl_tensor.byte_offset = 0
        key = _dl_next[0]
        _dl_next[0] += 1
        m.manager_ctx = key
        m.deleter = _dl_delete
        _dl_alive[key] = (m, shape, self)
        return _PyCapsule_New(ctypes.addressof(m), _DLTENSOR, ctypes.cast(_capsule_destructor, _vp))

    def memoryview(self):
        """Zero-copy view of CPU-visible memory (emulated GPUs, host buffers)."""
        if not self.host:
            raise Error("unavailable", "this buffer is not CPU-visible (device memory of a real GPU): use download()")
        return memoryview((ctypes.c_uint8 * self.size).from_address(self.host))

    def numpy(self, dtype="uint8"):
        """Zero-copy numpy array over CPU-visible memory (needs numpy)."""
        import numpy as np
        return np.frombuffer(self.memoryview(), dtype=dtype)

    def free(self):
        if self._raw is None:
            raise Error("not_found", "buffer already freed")
        if self._device._h:
            if getattr(self, "_registered", False):
                _check(_buf_unreg_cuda(self._device._h, ctypes.byref(self._raw)))
            else:
                _check(_buf_free(self._device._h, ctypes.byref(self._raw)))
        self._raw = None


_open_devices = weakref.WeakSet()


@atexit.register
def _close_open_devices():
    # Before the interpreter tears modules (and, with PyTorch, CUDA) down: a
    # device closed later would free CUDA registrations through a dead context.
    for d in list(_open_devices):
        d.close()


class Device:
    """open_device: backend "emu" (default, no GPU needed), "kfd" or "nv"."""
    _h = None

    def __init__(self, backend="emu", preset=None, gpus=0, engines=0, gen=None, memory_per_gpu=0, process_slot=-1):
        o = _DeviceOptions(ctypes.sizeof(_DeviceOptions), backend.encode(), preset.encode() if preset else None,
                           gpus, engines, gen.encode() if gen else None, memory_per_gpu, process_slot)
        h = _vp()
        _check(_dev_open(ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        self._children = weakref.WeakSet()  # queues, signals, communicators, plans
        _open_devices.add(self)

    def _adopt(self, child):
        if not self._h:
            raise Error("invalid_argument", "the device is closed")
        self._children.add(child)

    def close(self):
        """Destroys what was made from this device (plans, then communicators, queues and
        signals), then the device. Buffers die with it."""
        if self._h:
            for rank in (Plan, Communicator, Queue, Signal):
                for c in [c for c in list(self._children) if isinstance(c, rank)]:
                    c._destroy()
            _dev_close(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def gpu_count(self):
        n = _int()
        _check(_dev_gpus(self._h, ctypes.byref(n)))
        return n.value

    def engines(self, gpu):
        ids = (_int * 256)()
        n = _int()
        _check(_dev_engines(self._h, gpu, ids, 256, ctypes.byref(n)))
        return list(ids[: n.value])

    def topology(self):
        need = _sz()
        _check(_dev_topo(self._h, None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        _check(_dev_topo(self._h, buf, need.value, ctypes.byref(need)))
        return json.loads(buf.value.decode())

    def alloc(self, gpu, nbytes, kind=DEVICE):
        raw = _Buffer()
        _check(_buf_alloc(self._h, gpu, nbytes, kind, ctypes.byref(raw)))
        return Buffer(self, raw)

    def alloc_cuda(self, gpu, nbytes):
        """CUDA memory on `gpu` (nv backend) the engines and CUDA both use; torch.from_dlpack views it."""
        raw = _Buffer()
        _check(_buf_alloc_cuda(self._h, gpu, nbytes, ctypes.byref(raw)))
        ptr = ctypes.c_uint64()
        _check(_buf_cuda_ptr(self._h, ctypes.byref(raw), ctypes.byref(ptr)))
        return Buffer(self, raw, ptr.value)

    def register_cuda(self, ptr, nbytes, gpu=0):
        """Registers CUDA memory (cuMemCreate with POSIX-fd handles: PyTorch with
        expandable_segments:True) so that collectives can use it; Buffer.free() unregisters."""
        raw = _Buffer()
        _check(_buf_reg_cuda(self._h, gpu, int(ptr), nbytes, ctypes.byref(raw)))
        b = Buffer(self, raw, int(ptr))
        b._registered = True
        return b

    def cuda_ordinal(self, gpu):
        o = _int()
        _check(_dev_cuda_ordinal(self._h, gpu, ctypes.byref(o)))
        return o.value

    def _tensor_buffer(self, t, gpu):
        """The registered Buffer of a CUDA tensor's bytes (cached by pointer and size
        until release_tensors())."""
        if not getattr(t, "is_cuda", False):
            raise Error("invalid_argument", "expected a CUDA torch tensor, got " + type(t).__name__ +
                        (" on " + str(t.device) if hasattr(t, "device") else ""))
        if not t.is_contiguous():
            raise Error("invalid_argument", "the tensor is not contiguous: call .contiguous() first")
        key = (t.data_ptr(), t.numel() * t.element_size(), gpu)
        cache = self.__dict__.setdefault("_tensor_regs", {})
        if key not in cache:
            cache[key] = self.register_cuda(key[0], key[1], gpu)
        return cache[key]

    def release_tensors(self):
        """Unregisters every tensor registered by the torch calls. Call it before the
        memory goes back to CUDA (torch.cuda.empty_cache(), or the tensors dying)."""
        for b in self.__dict__.pop("_tensor_regs", {}).values():
            b.free()


class _Child:
    """Something made from a Device: destroyed before it (Device.close) or when collected."""
    _destroy_fn = None
    _h = None

    def _destroy(self):
        if self._h:
            type(self)._destroy_fn(self._h)
            self._h = None

    def __del__(self):
        self._destroy()


class Signal(_Child):
    _destroy_fn = staticmethod(_sig_destroy)

    def __init__(self, device, initial=0):
        device._adopt(self)
        h = _vp()
        _check(_sig_create(device._h, initial, ctypes.byref(h)))
        self._h = h

    value = property(lambda self: _sig_value(self._h))
    address = property(lambda self: _sig_addr(self._h))

    def add(self, delta=1):
        _sig_add(self._h, delta)

    def wait(self, value, timeout_ms=10000):
        _check(_sig_wait(self._h, value, timeout_ms))


class Queue(_Child):
    """One DMA queue (ring) on one engine; commands are recorded, then submitted."""
    _destroy_fn = staticmethod(_q_destroy)

    def __init__(self, device, gpu, engine):
        device._adopt(self)
        h = _vp()
        _check(_q_create(device._h, gpu, engine, None, ctypes.byref(h)))
        self._h = h

    def copy(self, dst, src, nbytes):
        _check(_q_copy(self._h, int(dst), int(src), nbytes))

    def fill(self, dst, value, nbytes):
        _check(_q_fill(self._h, int(dst), value, nbytes))

    def signal_add(self, signal, delta=1):
        _check(_q_sadd(self._h, signal._h, delta))

    def wait_signal(self, signal, value):
        _check(_q_swait(self._h, signal._h, value))

    def submit(self, timeout_ms=1000):
        t = _u64()
        _check(_q_submit(self._h, timeout_ms, ctypes.byref(t)))
        return t.value

    def wait(self, ticket=2**64 - 1, timeout_ms=10000):
        _check(_q_wait(self._h, ticket, timeout_ms))

    completed = property(lambda self: _q_completed(self._h))


def _array(buffers):
    bufs = list(buffers)
    arr = (_Buffer * len(bufs))(*[b._raw for b in bufs])
    return arr, len(bufs)


class Plan(_Child):
    _destroy_fn = staticmethod(_plan_destroy)

    def __init__(self, comm, op, nbytes, send, recv, variant="auto", root=0, peer=1, prelaunch=False):
        if op not in OPS or variant not in VARIANTS:
            raise Error("invalid_argument", f"op {op!r} / variant {variant!r}: ops are {sorted(OPS)}, "
                                            f"variants {sorted(VARIANTS)}")
        comm._device._adopt(self)
        self._comm = comm  # keeps the communicator alive
        s, ns = _array(send)
        r, nr = _array(recv)
        a = _CollArgs(ctypes.sizeof(_CollArgs), OPS[op], VARIANTS[variant], nbytes, root, peer, s, ns, r, nr,
                      int(prelaunch), 0)
        h = _vp()
        _check(_plan_create(comm._h, ctypes.byref(a), ctypes.byref(h)))
        self._h = h

    variant = property(lambda self: _variant_name(_plan_variant(self._h)).decode())

    def launch(self, timeout_ms=10000):
        _check(_plan_launch(self._h, timeout_ms))

    def prelaunch(self, timeout_ms=10000):
        _check(_plan_prelaunch(self._h, timeout_ms))

    def release(self):
        _check(_plan_release(self._h))

    def wait(self, timeout_ms=10000):
        _check(_plan_wait(self._h, timeout_ms))

    def release_by_stores(self):
        """Hands the release of a prelaunched plan to another writer: [(address, value)]
        64-bit stores to make in order (a compute stream's write-value operation)."""
        st = (_Store * 4)()
        n = _int()
        _check(_plan_release_stores(self._h, st, 4, ctypes.byref(n)))
        return [(st[i].address, st[i].value) for i in range(n.value)]

    def consumed_store(self):
        """(address, value): the store the writer makes after its waits on the plan's
        completion; until it lands the plan counts as running (see conccl.h)."""
        st = _Store()
        _check(_plan_consumed_store(self._h, ctypes.byref(st)))
        return st.address, st.value

    def enqueue_on_stream(self, stream, timeout_ms=10000):
        """nv backend: order a prelaunch plan on a CUDA stream (a CUstream handle, a
        torch.cuda.Stream, or None for torch's current stream). Returns at once."""
        _check(_plan_enqueue_stream(self._h, _stream_handle(stream), timeout_ms))

    def completion(self, rank):
        """(address, value): rank's data is in place once the 64-bit word at address >= value."""
        a, v = _u64(), _u64()
        _check(_plan_completion(self._h, rank, ctypes.byref(a), ctypes.byref(v)))
        return a.value, v.value


def unique_id():
    """A new id for a communicator of one process per rank, as its printable string
    ("conccl-uid-..."): make it in one process and hand it to every rank."""
    uid = _UniqueId()
    _check(_get_uid(ctypes.byref(uid)))
    buf = ctypes.create_string_buffer(64)
    _check(_uid_to_string(ctypes.byref(uid), buf, len(buf)))
    return buf.value.decode()


class Communicator(_Child):
    """Ranks on the GPUs of one device (gpus[r] = rank r's GPU); loopback lets ranks share a GPU,
    and `queues` ("auto", "per_rank", "per_engine") says which queues they use on an engine."""
    _destroy_fn = staticmethod(_comm_destroy)

    QUEUES = {"auto": 0, "per_rank": 1, "per_engine": 2}

    def __init__(self, device, gpus=None, loopback=False, engines=None, timeout_ms=60000, queues="auto",
                 rank=None, nranks=None, unique_id=None, gpu=-1):
        """One process: gpus = every rank's GPU. One process per rank (docs/multiprocess.md):
        rank, nranks and unique_id (conccl.unique_id() made once, handed to every process;
        the device opened with process_slot=rank); gpu = this rank's GPU (-1: rank modulo
        the device's GPU count)."""
        if queues not in self.QUEUES:
            raise Error("invalid_argument", f"queues {queues!r}: one of {sorted(self.QUEUES)}")
        per_process = rank is not None or nranks is not None or unique_id is not None
        if per_process and (rank is None or nranks is None or unique_id is None or gpus is not None):
            raise Error("invalid_argument", "one process per rank: give rank, nranks and unique_id (and no gpus)")
        if not per_process and gpus is None:
            raise Error("invalid_argument", "give gpus (every rank in this process), or rank, nranks and unique_id")
        device._adopt(self)
        self._device = device
        eng = list(engines or [])
        ea = (_int * max(1, len(eng)))(*eng)
        o = _CommOptions(ctypes.sizeof(_CommOptions), 0, int(loopback), ea if eng else None, len(eng), timeout_ms,
                         self.QUEUES[queues])
        h = _vp()
        if per_process:
            uid = _UniqueId()
            _check(_uid_from_string(str(unique_id).encode(), ctypes.byref(uid)))
            _check(_comm_create_rank(device._h, rank, nranks, ctypes.byref(uid), gpu, ctypes.byref(o), ctypes.byref(h)))
            self._h = h
            self._gpus = None
            self._gpu = gpu if gpu >= 0 else rank % device.gpu_count  # as conccl_comm_create_rank picks
            return
        g = list(gpus)
        ga = (_int * len(g))(*g)
        _check(_comm_create(device._h, ga, len(g), ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        self._gpus = g

    size = property(lambda self: _comm_size(self._h))
    rank = property(lambda self: _comm_rank(self._h), doc="this process's rank (-1: every rank in this process)")
    cached_plans = property(lambda self: _comm_cached_plans(self._h),
                            doc="plans the NCCL-shaped calls keep (those of the 64 most recently used argument sets)")

    def plan(self, op, nbytes, send, recv, **kw):
        return Plan(self, op, nbytes, send, recv, **kw)

    # NCCL-shaped calls. One process: one buffer (or tensor) per rank, in
    # lists. One process per rank: this rank's alone (a list of one, or the
    # buffer itself), as ncclAllGather; broadcast's root_send may be None off
    # the root. The C API's notes on conccl_all_gather say the rest.
    def _mine(self, buffers):
        if self.rank < 0:
            return list(buffers)
        mine = list(buffers) if isinstance(buffers, (list, tuple)) else [buffers]
        if len(mine) != 1:
            raise Error("invalid_argument", f"one process per rank: give this rank's buffer alone, not {len(mine)}")
        return mine

    def all_gather(self, send, recv, nbytes):
        s, _ = _array(self._mine(send))
        r, _ = _array(self._mine(recv))
        _check(_all_gather(s, r, nbytes, self._h, None))

    def all_to_all(self, send, recv, nbytes):
        s, _ = _array(self._mine(send))
        r, _ = _array(self._mine(recv))
        _check(_all_to_all(s, r, nbytes, self._h, None))

    def broadcast(self, root_send, recv, nbytes, root=0):
        s = _array([root_send])[0] if root_send is not None else None
        r, _ = _array(self._mine(recv))
        _check(_broadcast(s, r, nbytes, root, self._h, None))

    # ---- PyTorch: CUDA tensors, ordered on a CUDA stream (nv backend) ----
    def all_gather_into_tensor(self, outputs, inputs, stream=None):
        """outputs[r] (size x input bytes) of every rank r gets every rank's inputs[s]
        at offset s x input bytes, like torch.distributed.all_gather_into_tensor with
        one process per rank. Ordered on `stream` (default: torch's current stream):
        the copies start when the stream's earlier work is done, and its later work
        sees the results. Returns at once. With one process per rank, outputs and
        inputs are this rank's tensors (as torch.distributed takes them); the call
        also returns at once there (the host waits only when more calls than the
        library keeps in flight are outstanding)."""
        self._tensor_call(_all_gather, outputs, inputs, stream)

    def all_to_all_single(self, outputs, inputs, stream=None):
        """outputs[d] chunk s = inputs[s] chunk d (equal chunks), ordered on the stream."""
        self._tensor_call(_all_to_all, outputs, inputs, stream)

    def _tensor_call(self, fn, outputs, inputs, stream):
        outputs, inputs = self._mine(outputs), self._mine(inputs)
        n = self.size
        mine = 1 if self.rank >= 0 else n  # tensors given by this process
        if len(outputs) != mine or len(inputs) != mine:
            raise Error("invalid_argument", f"give {'this rank' if mine == 1 else 'every rank'}'s output and "
                                            f"input tensor ({mine} each), got {len(outputs)} and {len(inputs)}")
        dev = self._device
        gpus = [self._gpu] if self.rank >= 0 else getattr(self, "_gpus", [0] * n)
        send = [dev._tensor_buffer(t, gpus[r]) for r, t in enumerate(inputs)]
        recv = [dev._tensor_buffer(t, gpus[r]) for r, t in enumerate(outputs)]
        nbytes = send[0].size
        if any(b.size != nbytes for b in send) or any(b.size != nbytes * n for b in recv):
            raise Error("invalid_argument", f"every input must have the same bytes and every output {n} times "
                                            f"that: inputs {[b.size for b in send]}, outputs {[b.size for b in recv]}")
        s, _ = _array(send)
        r, _ = _array(recv)
        _check(fn(s, r, nbytes, self._h, _stream_handle(stream)))


def _stream_handle(stream):
    """A CUstream for the C API: a torch.cuda.Stream, an int handle, or None for torch's
    current stream; the legacy default stream (handle 0) becomes CU_STREAM_LEGACY."""
    if stream is None:
        import torch
        stream = torch.cuda.current_stream()
    h = getattr(stream, "cuda_stream", stream)
    return _vp(int(h) or CU_STREAM_LEGACY)
