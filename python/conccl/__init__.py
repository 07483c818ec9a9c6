"""conccl - Python bindings for ConCCL over its C API (include/conccl/conccl.h).

Pure ctypes: nothing to compile. The shared library is found through
$CONCCL_LIBRARY (a path), else as libconccl.so.0 on the loader's path
(an installed ConCCL: `cmake --install build --prefix P`, then
LD_LIBRARY_PATH=P/lib when P is not a system prefix).

    import conccl
    with conccl.Device("emu", settings="preset=mi300x") as dev:
        comm = conccl.Communicator(dev, range(dev.gpu_count))
        send = [dev.alloc(r, 1 << 20) for r in range(dev.gpu_count)]
        recv = [dev.alloc(r, (1 << 20) * dev.gpu_count) for r in range(dev.gpu_count)]
        comm.all_gather(send, recv, 1 << 20)

Every failure raises conccl.Error carrying the library's status and message,
including arguments checked here before they reach the library: an integer
outside its C type's range is "out_of_range", a wrong type "invalid_argument",
each naming the argument. Buffers whose memory the CPU sees (emulated GPUs,
host memory) have zero-copy views: Buffer.memoryview() (plain bytes) and
Buffer.numpy(dtype) (numpy optional). Closing a device ends everything made
from it: a later use raises conccl.Error ("... the device was closed").

Every buffer speaks DLPack (Buffer.__dlpack__): numpy.from_dlpack(buf) and
torch.from_dlpack(buf) on CPU-visible memory, torch.from_dlpack(buf) on CUDA
memory of the nv backend (Device.alloc_cuda). PyTorch tensors go into
collectives directly, in torch.distributed's shapes:
Communicator.all_gather_into_tensor(output_tensor, input_tensor) and
all_to_all_single(output, input). On the nv backend they register the tensors'
CUDA memory (PyTorch needs PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
whose memory the copy engines can map) and order the call on the current CUDA
stream: the copies start when the stream's earlier work is done, and the
stream's later work sees the data; the call returns at once. On the emulator
they take CPU tensors that view the device's buffers.

Reductions, as NCCL's and torch.distributed's: on Buffers
Communicator.reduce_scatter(send, recv, recvcount, dtype, op),
all_reduce(send, recv, count, dtype, op) and reduce(send, recv, count, dtype,
op, root), counts in elements; on tensors all_reduce(tensor, op) (in place),
reduce_scatter_tensor(output, input, op) and reduce(tensor, dst, op). dtype is
a conccl.DataType or its name ("float32", "bfloat16", "float16", "int32",
"int64", "uint8"); op a conccl.RedOp, its name ("sum", "prod", "max", "min",
"avg") or a torch.distributed.ReduceOp. The inputs are reduced in rank order
(bfloat16 and float16 accumulate in float32 and round once), so the result
is the same bits on every backend (include/conccl/conccl.h says exactly).
"""
import atexit
import ctypes
import ctypes.util
import enum
import json
import operator
import os
import weakref

__all__ = ["Error", "Device", "Buffer", "Signal", "Queue", "Communicator", "Plan", "library", "version",
           "DataType", "RedOp",
           "CU_STREAM_LEGACY", "HOST"]

_u64 = ctypes.c_uint64
_sz = ctypes.c_size_t
_int = ctypes.c_int
_vp = ctypes.c_void_p
_cp = ctypes.c_char_p

DEVICE, HOST, CUDA = 0, 1, 2
CU_STREAM_LEGACY = 1  # cuda.h's handle of the legacy default stream (a stream of 0 means "no stream" here)


class DataType(enum.IntEnum):
    """Element types of the reductions (conccl_datatype: NCCL's ncclDataType_t values)."""
    UINT8 = 1
    INT32 = 2
    INT64 = 4
    FLOAT16 = 6
    FLOAT32 = 7
    BFLOAT16 = 9


class RedOp(enum.IntEnum):
    """Reduction operators (conccl_redop: NCCL's ncclRedOp_t values)."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


# Names the reductions take for dtype and op: numpy's and torch's dtype names
# and the short forms nccl-tests prints; torch.distributed's PRODUCT as "product".
DTYPES = {"uint8": DataType.UINT8, "u8": DataType.UINT8, "int32": DataType.INT32, "i32": DataType.INT32,
          "int64": DataType.INT64, "i64": DataType.INT64, "float16": DataType.FLOAT16, "half": DataType.FLOAT16,
          "f16": DataType.FLOAT16, "float32": DataType.FLOAT32, "float": DataType.FLOAT32, "f32": DataType.FLOAT32,
          "bfloat16": DataType.BFLOAT16, "bf16": DataType.BFLOAT16}
REDOPS = {"sum": RedOp.SUM, "prod": RedOp.PROD, "product": RedOp.PROD, "max": RedOp.MAX, "min": RedOp.MIN,
          "avg": RedOp.AVG}


class _Buffer(ctypes.Structure):
    _fields_ = [("va", _u64), ("host", _vp), ("size", _sz), ("gpu", _int), ("kind", _int), ("id", _u64)]


class _DeviceOptions(ctypes.Structure):
    _fields_ = [("struct_size", _sz), ("backend", _cp), ("preset", _cp), ("gpus", _int), ("engines", _int),
                ("gen", _cp), ("memory_per_gpu", _sz), ("process_slot", _int), ("settings", _cp)]


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
# The destroy and close calls and conccl_signal_add return a conccl_status since the C API's version 2.
_dev_close = _sig("conccl_device_close", _status, _vp)
_dev_gpus = _sig("conccl_device_gpu_count", _status, _vp, _P(_int))
_dev_engines = _sig("conccl_device_engines", _status, _vp, _int, _P(_int), _int, _P(_int))
_dev_topo = _sig("conccl_device_topology_json", _status, _vp, _cp, _sz, _P(_sz))
_buf_alloc = _sig("conccl_buffer_alloc", _status, _vp, _int, _sz, _int, _P(_Buffer))
_buf_free = _sig("conccl_buffer_free", _status, _vp, _P(_Buffer))
_buf_up = _sig("conccl_buffer_upload", _status, _vp, _P(_Buffer), _sz, _vp, _sz, ctypes.c_uint32)
_buf_down = _sig("conccl_buffer_download", _status, _vp, _vp, _P(_Buffer), _sz, _sz, ctypes.c_uint32)
_sig_create = _sig("conccl_signal_create", _status, _vp, _u64, _P(_vp))
_sig_destroy = _sig("conccl_signal_destroy", _status, _vp)
_sig_value = _sig("conccl_signal_value", _u64, _vp)
_sig_add = _sig("conccl_signal_add", _status, _vp, _u64)
_sig_wait = _sig("conccl_signal_wait", _status, _vp, _u64, ctypes.c_uint32)
_sig_addr = _sig("conccl_signal_address", _u64, _vp)
_q_create = _sig("conccl_queue_create", _status, _vp, _int, _int, _vp, _P(_vp))
_q_destroy = _sig("conccl_queue_destroy", _status, _vp)
_q_copy = _sig("conccl_queue_copy", _status, _vp, _u64, _u64, _u64)
_q_fill = _sig("conccl_queue_fill", _status, _vp, _u64, ctypes.c_uint32, _u64)
_q_sadd = _sig("conccl_queue_signal_add", _status, _vp, _vp, _u64)
_q_swait = _sig("conccl_queue_wait_ge", _status, _vp, _vp, _u64)
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
_comm_destroy = _sig("conccl_comm_destroy", _status, _vp)
_comm_size = _sig("conccl_comm_size", _int, _vp)
_plan_create = _sig("conccl_plan_create", _status, _vp, _P(_CollArgs), _P(_vp))
_plan_destroy = _sig("conccl_plan_destroy", _status, _vp)
_plan_launch = _sig("conccl_plan_launch", _status, _vp, ctypes.c_uint32)
_plan_prelaunch = _sig("conccl_plan_prelaunch", _status, _vp, ctypes.c_uint32)
_plan_release = _sig("conccl_plan_release", _status, _vp)
_plan_wait = _sig("conccl_plan_wait", _status, _vp, ctypes.c_uint32)
_plan_variant = _sig("conccl_plan_variant", _int, _vp)
_variant_name = _sig("conccl_variant_name", _cp, _int)
_op_name = _sig("conccl_op_name", _cp, _int)
_datatype_name = _sig("conccl_datatype_name", _cp, _int)
_redop_name = _sig("conccl_redop_name", _cp, _int)


def _library_names(name_of, numbers=range(64)):
    """{name: number} for every number the library names (its C++ tables, which
    the C header's enums are checked against when it builds): one source of names."""
    return {name_of(i).decode(): i for i in numbers if name_of(i) != b"?"}


# Collective ops and variants by the library's names; the ops also as torch spells
# them ("all_gather" beside "allgather").
OPS = _library_names(_op_name)
OPS.update({torch_name: OPS[name] for name, torch_name in (("allgather", "all_gather"), ("alltoall", "all_to_all"))})
VARIANTS = _library_names(_variant_name)
_plan_completion = _sig("conccl_plan_completion", _status, _vp, _int, _P(_u64), _P(_u64))
_all_gather = _sig("conccl_all_gather", _status, _P(_Buffer), _P(_Buffer), _sz, _vp, _vp)
_all_to_all = _sig("conccl_all_to_all", _status, _P(_Buffer), _P(_Buffer), _sz, _vp, _vp)
_broadcast = _sig("conccl_broadcast", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _vp, _vp)
_gather = _sig("conccl_gather", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _vp, _vp)
_scatter = _sig("conccl_scatter", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _vp, _vp)
# (send, recv, count, dt, op[, root], comm, stream): the C enums pass as ints.
_c_reduce_scatter = _sig("conccl_reduce_scatter", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _int, _vp, _vp)
_c_all_reduce = _sig("conccl_all_reduce", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _int, _vp, _vp)
_c_reduce = _sig("conccl_reduce", _status, _P(_Buffer), _P(_Buffer), _sz, _int, _int, _int, _vp, _vp)
_buf_alloc_cuda = _sig("conccl_buffer_alloc_cuda", _status, _vp, _int, _sz, _P(_Buffer))
_buf_cuda_ptr = _sig("conccl_buffer_cuda_pointer", _status, _vp, _P(_Buffer), _P(ctypes.c_uint64))
_buf_reg_cuda = _sig("conccl_buffer_register_cuda", _status, _vp, _int, _u64, _sz, _P(_Buffer))
_buf_unreg_cuda = _sig("conccl_buffer_unregister_cuda", _status, _vp, _P(_Buffer))
_dev_cuda_ordinal = _sig("conccl_device_cuda_ordinal", _status, _vp, _int, _P(_int))


class _CommStats(ctypes.Structure):
    _fields_ = [(f, _u64) for f in ("bootstrap_messages_sent", "bootstrap_messages_received", "calls",
                                    "window_calls", "window_plans")]


_win_register = _sig("conccl_comm_window_register", _status, _vp, _P(_Buffer), _P(_vp))
_win_deregister = _sig("conccl_comm_window_deregister", _status, _vp, _vp)
_comm_stats = _sig("conccl_comm_get_stats", _status, _vp, _P(_CommStats))
_comm_async_error = _sig("conccl_comm_get_async_error", _status, _vp, _P(_int))
_comm_ranks_gone = _sig("conccl_comm_get_ranks_gone", _status, _vp, _P(_int), _int, _P(_int))


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


class Error(RuntimeError):
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


# ---- arguments: checked here, before ctypes sees them ----------------------
# ctypes keeps an integer's low bits (Device(gpus=2**32 + 2) would open 2 GPUs)
# and fails inside its own internals on a wrong type, so every argument of
# every library call goes through one of these first.
_LIMITS = {
    "int": (-2**31, 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "size_t": (0, 2**(8 * ctypes.sizeof(ctypes.c_size_t)) - 1),
}


def _integer(name, value, ctype):
    """value as an int, if it is an integer (int, numpy integer) within the range of
    the C type `ctype` ("int", "uint32", "uint64", "size_t") it is passed as."""
    try:
        v = operator.index(value)
    except TypeError:
        raise Error("invalid_argument", f"{name} must be an integer (a C {ctype}), not {type(value).__name__} "
                                        f"{value!r}") from None
    lo, hi = _LIMITS[ctype]
    if not lo <= v <= hi:
        raise Error("out_of_range", f"{name} = {v} is outside {lo}..{hi}, the range of the C {ctype} it is passed "
                                    "as" + (": sizes and addresses are not negative" if v < 0 <= lo else ""))
    return v


def _integers(name, values, ctype):
    """A list of ints from an iterable of integers, each checked as _integer does."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise Error("invalid_argument", f"{name} must be a sequence of integers, not {type(values).__name__} "
                                        f"{values!r}")
    return [_integer(f"{name}[{i}]", v, ctype) for i, v in enumerate(values)]


def _text(name, value, optional=False):
    """A str as the bytes a const char* takes (None stays None where optional)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Error("invalid_argument", f"{name} must be a str{' or None' if optional else ''}, not "
                                        f"{type(value).__name__} {value!r}")
    return value.encode()


def _choice(name, value, choices):
    if not isinstance(value, str) or value not in choices:
        raise Error("invalid_argument", f"{name} {value!r}: one of {sorted(choices)}")
    return choices[value]


_DTYPE_NAMES = "'float32', 'bfloat16', 'float16', 'int32', 'int64', 'uint8' (or a conccl.DataType)"
# torch dtypes by str(dtype), so that no torch import is needed to read one.
_TORCH_DTYPES = {"torch.float32": DataType.FLOAT32, "torch.bfloat16": DataType.BFLOAT16,
                 "torch.float16": DataType.FLOAT16, "torch.int32": DataType.INT32, "torch.int64": DataType.INT64,
                 "torch.uint8": DataType.UINT8}
# torch.distributed.ReduceOp's members the library reduces, by attribute name.
_TORCH_REDOPS = {"SUM": RedOp.SUM, "PRODUCT": RedOp.PROD, "MAX": RedOp.MAX, "MIN": RedOp.MIN, "AVG": RedOp.AVG}


def _enum_arg(name, value, enum_type, by_name, from_torch, expected):
    """A reduction's enum argument: a member of enum_type, its name (a key of by_name),
    its int value (never a bool), or what from_torch(value) makes of a torch object
    (None: not one it knows). Else an error that says what is `expected`."""
    if isinstance(value, str):
        found = by_name.get(value)
    else:
        found = from_torch(value)
        if found is None and not isinstance(value, bool):
            try:
                found = enum_type(operator.index(value))
            except (TypeError, ValueError):
                pass
    if found is None:
        raise Error("invalid_argument", f"{name} {value!r}: {expected}")
    return found


def _dtype_arg(name, value):
    """A reduction's element type: a DataType, its name (DTYPES), its int value, or a
    torch dtype of one of the six."""
    return _enum_arg(name, value, DataType, DTYPES, lambda v: _TORCH_DTYPES.get(str(v)),
                     f"reductions take {_DTYPE_NAMES}; NCCL's int8, uint32, uint64 and float64 have no reduction "
                     "here (convert the data first)")


def _torch_redop(name, value):
    """The RedOp of a torch.distributed.ReduceOp member (an error for one that does not
    reduce here); None for a value not of torch."""
    if isinstance(value, bool) or not type(value).__module__.startswith("torch"):
        return None
    # torch.distributed.ReduceOp: its members compare equal to themselves
    # (objects in torch 1.13, enum values later); no other way to read them.
    ops = getattr(__import__("sys").modules.get("torch.distributed"), "ReduceOp", None)
    for attr, ours in _TORCH_REDOPS.items():
        if ops is not None and value == getattr(ops, attr, None):
            return ours
    raise Error("invalid_argument", f"{name} {value!r}: of torch.distributed.ReduceOp only SUM, PRODUCT, MAX, "
                                    "MIN and AVG reduce here (not BAND, BOR, BXOR or PREMUL_SUM)")


def _op_arg(name, value):
    """A reduction operator: a RedOp, its name (REDOPS), its int value, or a
    torch.distributed.ReduceOp (SUM, PRODUCT, MAX, MIN, AVG)."""
    return _enum_arg(name, value, RedOp, REDOPS, lambda v: _torch_redop(name, v),
                     "one of 'sum', 'prod', 'max', 'min', 'avg', a conccl.RedOp or a torch.distributed.ReduceOp "
                     "(SUM, PRODUCT, MAX, MIN, AVG)")


def _tensor_dtype(name, t):
    dt = _TORCH_DTYPES.get(str(getattr(t, "dtype", None)))
    if dt is None:
        raise Error("invalid_argument", f"{name} is {t.dtype}: reductions take float32, bfloat16, float16, int32, "
                                        "int64 or uint8 tensors (convert it first, e.g. .to(torch.float32))")
    return dt


def _device_arg(device):
    if not isinstance(device, Device):
        raise Error("invalid_argument", f"device must be a conccl.Device, not {type(device).__name__}")
    return device._handle()


def _bytes_like(name, data):
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise Error("invalid_argument", f"{name} must be a bytes-like object (bytes, bytearray, memoryview, a "
                                        f"numpy array), not {type(data).__name__}") from None


class Buffer:
    """Memory engines can address: .va goes into commands; .host is the CPU mapping or None.

    The object holds the conccl_buffer struct the library returned and passes
    exactly that struct back. Once freed, or once its device is closed, every
    use raises conccl.Error saying which."""

    def __init__(self, device, raw, cuda_ptr=None):
        self._device = device
        self._raw = raw
        self._cuda_ptr = cuda_ptr
        self._gone = None  # why it can no longer be used: "was freed", "the device was closed"
        self._views = []  # weak references to the memoryviews handed out: released when the memory goes
        device._buffers.add(self)

    def _live(self, device=None, name="buffer"):
        """The struct to pass back, after checking the buffer is usable (on `device`, when given)."""
        parent = getattr(self, "_parent", None)
        if parent is not None and not self._gone:
            try:
                parent._live(device, name)
            except Error:
                self._gone = parent._gone or "was freed"
        if self._gone:  # a double free stays "not_found", as it always was here
            raise Error("not_found" if self._gone == "was freed" else "invalid_argument",
                        f"{name}: this buffer {self._gone}; allocate a new one (on an open device)")
        if device is not None and device is not self._device:
            raise Error("invalid_argument", f"{name} belongs to another device: buffers go only into calls of the "
                                            "device that allocated them")
        return self._raw

    def _invalidate(self, why):
        if not self._gone:
            self._gone = why
        for ref in self._views:
            try:
                v = ref()
                if v is not None:
                    v.release()
            except BufferError:  # something (a numpy array) holds the view's buffer: it cannot be released
                pass

    va = property(lambda self: self._live().va)
    # CUDA's pointer to CUDA memory (alloc_cuda, register_cuda), for CUDA and
    # DLPack; it differs from va on a device with a process_slot, where the
    # engines see the memory at an address in the slot's window.
    cuda_ptr = property(lambda self: self._cuda_ptr if self._live() is not None else None)
    size = property(lambda self: self._live().size)
    gpu = property(lambda self: self._live().gpu)
    host = property(lambda self: self._live().host)
    kind = property(lambda self: self._live().kind)

    def upload(self, data, offset=0, timeout_ms=10000):
        raw = self._live()
        mv = _bytes_like("data", data)
        offset = _integer("offset", offset, "size_t")
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        src = (ctypes.c_char * len(mv)).from_buffer_copy(mv) if mv.readonly else (ctypes.c_char * len(mv)).from_buffer(mv)
        _check(_buf_up(self._device._handle(), ctypes.byref(raw), offset, ctypes.addressof(src), len(mv), timeout_ms))

    def download(self, nbytes=None, offset=0, timeout_ms=10000):
        raw = self._live()
        offset = _integer("offset", offset, "size_t")
        n = _integer("nbytes", raw.size - offset if nbytes is None else nbytes, "size_t")
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        if offset > raw.size or n > raw.size - offset:
            raise Error("out_of_range", f"download of {n} bytes at offset {offset}: the buffer has {raw.size} bytes")
        out = ctypes.create_string_buffer(n)
        _check(_buf_down(self._device._handle(), out, ctypes.byref(raw), offset, n, timeout_ms))
        return out.raw

    def __dlpack_device__(self):
        """(kDLCUDA, CUDA ordinal) for CUDA memory, (kDLCPU, 0) for CPU-visible memory."""
        raw = self._live()
        if raw.kind == CUDA:
            return (_kDLCUDA, self._device.cuda_ordinal(raw.gpu))
        if not raw.host:
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
        """Zero-copy, writable view of CPU-visible memory (emulated GPUs, host buffers), as
        bytes (format 'B'): it indexes, slices and takes assignments. Freeing the buffer or
        closing its device releases it (numpy arrays over it stay the caller's to drop first)."""
        raw = self._live()
        if not raw.host:
            raise Error("unavailable", "this buffer is not CPU-visible (device memory of a real GPU): use download()")
        mv = _PyMemoryView_FromMemory(raw.host, raw.size, _PyBUF_WRITE)
        self._views = [v for v in self._views if v() is not None] + [weakref.ref(mv)]
        return mv

    def numpy(self, dtype="uint8"):
        """Zero-copy numpy array over CPU-visible memory (needs numpy). Drop it before the
        buffer is freed or its device closed: the array cannot be invalidated."""
        mv = self.memoryview()
        import numpy as np
        return np.frombuffer(mv, dtype=dtype)

    def view(self, offset, nbytes):
        """A Buffer for bytes [offset, offset + nbytes) of this one (a window's part, say):
        it passes the same allocation to the library, so calls through windows find it. It
        is not freed on its own, and stops working when this buffer does."""
        raw = self._live()
        offset, nbytes = _integer("offset", offset, "size_t"), _integer("nbytes", nbytes, "size_t")
        if offset > raw.size or nbytes > raw.size - offset or nbytes == 0:
            raise Error("out_of_range", f"view of {nbytes} bytes at offset {offset}: the buffer has {raw.size} bytes "
                                        "(and a view has at least one)")
        sub = _Buffer.from_buffer_copy(raw)
        sub.va = raw.va + offset
        sub.size = nbytes
        if raw.host:
            sub.host = raw.host + offset
        v = Buffer(self._device, sub, None if self._cuda_ptr is None else self._cuda_ptr + offset)
        v._parent = self
        return v

    def free(self):
        if getattr(self, "_parent", None) is not None:
            raise Error("invalid_argument", "free: this buffer is a view of another (Buffer.view); free that one")
        raw = self._live()
        dev = self._device._handle()
        try:
            if getattr(self, "_registered", False):
                _check(_buf_unreg_cuda(dev, ctypes.byref(raw)))
            else:
                _check(_buf_free(dev, ctypes.byref(raw)))
        finally:
            self._invalidate("was freed")


_PyMemoryView_FromMemory = ctypes.pythonapi.PyMemoryView_FromMemory
_PyMemoryView_FromMemory.restype = ctypes.py_object
_PyMemoryView_FromMemory.argtypes = [_vp, ctypes.c_ssize_t, _int]
_PyBUF_WRITE = 0x200

_open_devices = weakref.WeakSet()


@atexit.register
def _close_open_devices():
    # Before the interpreter tears modules (and, with PyTorch, CUDA) down: a
    # device closed later would free CUDA registrations through a dead context.
    for d in list(_open_devices):
        d.close()


def _settings_text(settings):
    """A backend's settings as the C API takes them: "key=value" words separated by
    spaces, from that str or from a dict {key: value} (bools as 0/1, lists as 0,1,1)."""
    if settings is None or isinstance(settings, str):
        return _text("settings", settings, optional=True)
    if not isinstance(settings, dict):
        raise Error("invalid_argument", f"settings must be a str ('key=value key=value') or a dict, not "
                                        f"{type(settings).__name__}")
    words = []
    for k, v in settings.items():
        if isinstance(v, bool):
            v = int(v)
        elif isinstance(v, (list, tuple)):
            v = ",".join(str(int(x)) for x in v)
        text = f"{k}={v}"
        if not isinstance(k, str) or not k or any(c.isspace() for c in text):
            raise Error("invalid_argument", f"settings entry {k!r}: {v!r}: keys are non-empty str and neither holds "
                                            f"spaces")
        words.append(text)
    return " ".join(words).encode()


class Device:
    """open_device: backend "emu" (default, no GPU needed), "kfd" or "nv".

    settings: the backend's own options, a str "key=value key=value" or a dict (each
    backend refuses keys it does not know and names those it does; docs/backends.md),
    e.g. settings="preset=small gpus=4" or {"preset": "small", "gpus": 4} for "emu",
    {"interrupt_waits": 0, "gpus": [0, 0]} for "nv", {"trap": "off"} for "kfd".

    preset, gpus, engines, gen, memory_per_gpu: the older form of the emulator's
    settings of the same names (the C API's deprecated conccl_device_options fields,
    which it turns into those settings), kept so that existing callers work; give
    them in settings instead. Each may also appear in settings if the two agree."""
    _h = None
    _closed = False

    def __init__(self, backend="emu", preset=None, gpus=0, engines=0, gen=None, memory_per_gpu=0, process_slot=-1,
                 settings=None):
        o = _DeviceOptions(ctypes.sizeof(_DeviceOptions), _text("backend", backend),
                           _text("preset", preset, optional=True), _integer("gpus", gpus, "int"),
                           _integer("engines", engines, "int"), _text("gen", gen, optional=True),
                           _integer("memory_per_gpu", memory_per_gpu, "size_t"),
                           _integer("process_slot", process_slot, "int"), _settings_text(settings))
        h = _vp()
        _check(_dev_open(ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        self._children = weakref.WeakSet()  # queues, signals, communicators, plans
        self._buffers = weakref.WeakSet()
        _open_devices.add(self)

    def _handle(self):
        if not self._h:
            raise Error("invalid_argument", "the device was closed: open a new conccl.Device" if self._closed else
                        "the device did not open")
        return self._h

    def _adopt(self, child):
        self._handle()
        self._children.add(child)

    def close(self):
        """Destroys what was made from this device (plans, then communicators, queues and
        signals), then the device. Its buffers die with it. Each of them refuses any later
        use with conccl.Error ("... the device was closed"), and the buffers' memoryviews
        are released."""
        if not self._h:
            return
        errors = []  # everything is closed first; then the first failure is raised
        for rank in (Plan, Communicator, Queue, Signal):
            for c in [c for c in list(self._children) if isinstance(c, rank)]:
                try:
                    c._destroy("is gone: the device was closed")
                except Error as e:
                    errors.append(e)
        self.__dict__.pop("_tensor_regs", None)
        self.__dict__.pop("_tensor_memo", None)
        for b in list(self._buffers):
            b._invalidate("is gone: the device was closed")
        try:
            _check(_dev_close(self._h))
        except Error as e:
            errors.append(e)
        self._h = None
        self._closed = True
        _open_devices.discard(self)
        if errors:
            raise errors[0]

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def gpu_count(self):
        n = _int()
        _check(_dev_gpus(self._handle(), ctypes.byref(n)))
        return n.value

    def engines(self, gpu):
        gpu = _integer("gpu", gpu, "int")
        ids = (_int * 256)()
        n = _int()
        _check(_dev_engines(self._handle(), gpu, ids, 256, ctypes.byref(n)))
        return list(ids[: n.value])

    def topology(self):
        need = _sz()
        _check(_dev_topo(self._handle(), None, 0, ctypes.byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        _check(_dev_topo(self._h, buf, need.value, ctypes.byref(need)))
        return json.loads(buf.value.decode())

    def alloc(self, gpu, nbytes, kind=DEVICE):
        if kind == CUDA:
            return self.alloc_cuda(gpu, nbytes)
        args = _integer("gpu", gpu, "int"), _integer("nbytes", nbytes, "size_t"), _integer("kind", kind, "int")
        raw = _Buffer()
        _check(_buf_alloc(self._handle(), *args, ctypes.byref(raw)))
        return Buffer(self, raw)

    def alloc_cuda(self, gpu, nbytes):
        """CUDA memory on `gpu` (nv backend) the engines and CUDA both use; torch.from_dlpack views it."""
        args = _integer("gpu", gpu, "int"), _integer("nbytes", nbytes, "size_t")
        raw = _Buffer()
        _check(_buf_alloc_cuda(self._handle(), *args, ctypes.byref(raw)))
        ptr = ctypes.c_uint64()
        _check(_buf_cuda_ptr(self._h, ctypes.byref(raw), ctypes.byref(ptr)))
        return Buffer(self, raw, ptr.value)

    def register_cuda(self, ptr, nbytes, gpu=0):
        """Registers CUDA memory (cuMemCreate with POSIX-fd handles: PyTorch with
        expandable_segments:True) so that collectives can use it; Buffer.free() unregisters."""
        args = _integer("gpu", gpu, "int"), _integer("ptr", ptr, "uint64"), _integer("nbytes", nbytes, "size_t")
        raw = _Buffer()
        _check(_buf_reg_cuda(self._handle(), *args, ctypes.byref(raw)))
        b = Buffer(self, raw, args[1])
        b._registered = True
        return b

    def cuda_ordinal(self, gpu):
        gpu = _integer("gpu", gpu, "int")
        o = _int()
        _check(_dev_cuda_ordinal(self._handle(), gpu, ctypes.byref(o)))
        return o.value

    def _tensor_buffer(self, t, gpu, name):
        """The conccl_buffer struct of a tensor's bytes. A CUDA tensor: its memory
        registered (cached by pointer and size until release_tensors()). A CPU tensor:
        the part of one of this device's CPU-visible buffers it views (a tensor made by
        torch.from_dlpack(buffer), or a slice of one), as engines reach no other host memory."""
        try:
            contiguous, ptr, nbytes = t.is_contiguous(), t.data_ptr(), t.numel() * t.element_size()
        except AttributeError:
            raise Error("invalid_argument", f"{name} must be a torch tensor, not {type(t).__name__}") from None
        if not contiguous:
            raise Error("invalid_argument", f"{name} is not contiguous: call .contiguous() first")
        # A tensor seen before (calls reuse their tensors): the struct found then, while
        # the buffer it lies in is still usable. Finding it again scans every buffer of
        # the device, which grows with the program.
        key = (ptr, nbytes, gpu, t.is_cuda)
        memo = self.__dict__.setdefault("_tensor_memo", {})
        hit = memo.get(key)
        if hit is not None:
            b = hit[0]()
            if b is not None and not b._gone:
                return hit[1]
            del memo[key]
        if len(memo) >= 4096:
            memo.clear()
        b, struct = self._find_tensor_buffer(t, ptr, nbytes, gpu, name)
        memo[key] = (weakref.ref(b), struct)
        return struct

    def _find_tensor_buffer(self, t, ptr, nbytes, gpu, name):
        """_tensor_buffer's search: (the Buffer the tensor lies in, its struct)."""
        if t.is_cuda:
            # Inside a CUDA buffer of this device (alloc_cuda, register_cuda; a window's,
            # say): that buffer's part, with no registration of its own, so that calls
            # through windows find the window.
            for b in list(self._buffers):
                cp, raw = b._cuda_ptr, b._raw
                if (cp and not b._gone and getattr(b, "_parent", None) is None and cp <= ptr and
                        ptr + nbytes <= cp + raw.size):
                    off = ptr - cp
                    if off == 0 and nbytes == raw.size:
                        return b, raw
                    return b, _Buffer(raw.va + off, None, nbytes, raw.gpu, raw.kind, raw.id)
            key = (ptr, nbytes, gpu)
            cache = self.__dict__.setdefault("_tensor_regs", {})
            if key not in cache:
                cache[key] = self.register_cuda(ptr, nbytes, gpu)
            return cache[key], cache[key]._live(self, name)
        if t.device.type == "cpu":
            for b in list(self._buffers):
                raw = b._raw
                if not b._gone and raw.host and raw.host <= ptr and ptr + nbytes <= raw.host + raw.size:
                    off = ptr - raw.host
                    if off == 0 and nbytes == raw.size:
                        return b, raw  # the whole buffer: the struct exactly as allocated
                    return b, _Buffer(raw.va + off, raw.host + off, nbytes, raw.gpu, raw.kind, raw.id)
            raise Error("invalid_argument", f"{name}: this CPU tensor's memory is not a buffer of this device, and "
                                            "the engines reach no other host memory: make it with "
                                            "torch.from_dlpack(device.alloc(gpu, nbytes)) (CUDA tensors on the nv "
                                            "backend are registered as they come)")
        raise Error("invalid_argument", f"{name} is on {t.device}: give CUDA tensors (nv backend) or CPU tensors "
                                        "viewing this device's buffers (emu)")

    def release_tensors(self):
        """Unregisters every tensor registered by the torch calls. Call it before the
        memory goes back to CUDA (torch.cuda.empty_cache(), or the tensors dying)."""
        self.__dict__.pop("_tensor_memo", None)
        for b in self.__dict__.pop("_tensor_regs", {}).values():
            b.free()


class _Child:
    """Something made from a Device: destroyed before it (Device.close) or when collected.
    Afterwards every use raises conccl.Error saying why."""
    _destroy_fn = None
    _h = None
    _gone = "was not created"
    _what = "object"

    def _handle(self):
        if not self._h:
            raise Error("invalid_argument", f"this {self._what} {self._gone}")
        return self._h

    def _destroy(self, why="was destroyed"):
        if self._h:
            rc = type(self)._destroy_fn(self._h)
            self._h = None
            self._gone = why
            _check(rc)

    def __del__(self):
        self._destroy()


class Signal(_Child):
    _destroy_fn = staticmethod(_sig_destroy)
    _what = "signal"

    def __init__(self, device, initial=0):
        dh = _device_arg(device)
        initial = _integer("initial", initial, "uint64")
        device._adopt(self)
        self._device = device
        h = _vp()
        _check(_sig_create(dh, initial, ctypes.byref(h)))
        self._h = h

    value = property(lambda self: _sig_value(self._handle()))
    address = property(lambda self: _sig_addr(self._handle()))

    def add(self, delta=1):
        delta = _integer("delta", delta, "uint64")
        _check(_sig_add(self._handle(), delta))

    def wait(self, value, timeout_ms=10000):
        args = _integer("value", value, "uint64"), _integer("timeout_ms", timeout_ms, "uint32")
        _check(_sig_wait(self._handle(), *args))


def _signal_arg(signal, device):
    if not isinstance(signal, Signal):
        raise Error("invalid_argument", f"signal must be a conccl.Signal, not {type(signal).__name__}")
    if signal._device is not device:
        raise Error("invalid_argument", "signal belongs to another device: queues add to and wait on signals of "
                                        "their own device")
    return signal._handle()


class Queue(_Child):
    """One DMA queue (ring) on one engine; commands are recorded, then submitted."""
    _destroy_fn = staticmethod(_q_destroy)
    _what = "queue"

    def __init__(self, device, gpu, engine):
        dh = _device_arg(device)
        args = _integer("gpu", gpu, "int"), _integer("engine", engine, "int")
        device._adopt(self)
        self._device = device
        h = _vp()
        _check(_q_create(dh, *args, None, ctypes.byref(h)))
        self._h = h

    def copy(self, dst, src, nbytes):
        args = _integer("dst", dst, "uint64"), _integer("src", src, "uint64"), _integer("nbytes", nbytes, "uint64")
        _check(_q_copy(self._handle(), *args))

    def fill(self, dst, value, nbytes):
        args = _integer("dst", dst, "uint64"), _integer("value", value, "uint32"), _integer("nbytes", nbytes, "uint64")
        _check(_q_fill(self._handle(), *args))

    def signal_add(self, signal, delta=1):
        h = self._handle()
        s = _signal_arg(signal, self._device)
        _check(_q_sadd(h, s, _integer("delta", delta, "uint64")))

    def wait_ge(self, signal, value):
        """The engine waits until the signal's value >= value."""
        h = self._handle()
        s = _signal_arg(signal, self._device)
        _check(_q_swait(h, s, _integer("value", value, "uint64")))

    wait_signal = wait_ge  # its first name

    def submit(self, timeout_ms=1000):
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        t = _u64()
        _check(_q_submit(self._handle(), timeout_ms, ctypes.byref(t)))
        return t.value

    def wait(self, ticket=2**64 - 1, timeout_ms=10000):
        args = _integer("ticket", ticket, "uint64"), _integer("timeout_ms", timeout_ms, "uint32")
        _check(_q_wait(self._handle(), *args))

    completed = property(lambda self: _q_completed(self._handle()))


def _array(name, buffers, device):
    """A C array of the buffers' structs (exactly as allocated), each checked to be a
    live conccl.Buffer of `device`."""
    if isinstance(buffers, Buffer) or isinstance(buffers, (str, bytes)) or not hasattr(buffers, "__iter__"):
        raise Error("invalid_argument", f"{name} must be a list of conccl.Buffer, not {type(buffers).__name__}")
    bufs = list(buffers)
    for i, b in enumerate(bufs):
        if not isinstance(b, Buffer):
            raise Error("invalid_argument", f"{name}[{i}] must be a conccl.Buffer, not {type(b).__name__}")
    arr = (_Buffer * len(bufs))(*[b._live(device, f"{name}[{i}]") for i, b in enumerate(bufs)])
    return arr, len(bufs)


class Plan(_Child):
    _destroy_fn = staticmethod(_plan_destroy)
    _what = "plan"

    def __init__(self, comm, op, nbytes, send, recv, variant="auto", root=0, peer=1, prelaunch=False):
        ch = comm._handle()
        dev = comm._device
        o, v = _choice("op", op, OPS), _choice("variant", variant, VARIANTS)
        nbytes = _integer("nbytes", nbytes, "uint64")
        root, peer = _integer("root", root, "int"), _integer("peer", peer, "int")
        s, ns = _array("send", send, dev)
        r, nr = _array("recv", recv, dev)
        dev._adopt(self)
        self._comm = comm  # keeps the communicator alive
        a = _CollArgs(ctypes.sizeof(_CollArgs), o, v, nbytes, root, peer, s, ns, r, nr, int(bool(prelaunch)), 0)
        h = _vp()
        _check(_plan_create(ch, ctypes.byref(a), ctypes.byref(h)))
        self._h = h

    variant = property(lambda self: _variant_name(_plan_variant(self._handle())).decode())

    def launch(self, timeout_ms=10000):
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        _check(_plan_launch(self._handle(), timeout_ms))

    def prelaunch(self, timeout_ms=10000):
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        _check(_plan_prelaunch(self._handle(), timeout_ms))

    def release(self):
        _check(_plan_release(self._handle()))

    def wait(self, timeout_ms=10000):
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        _check(_plan_wait(self._handle(), timeout_ms))

    def release_by_stores(self):
        """Hands the release of a prelaunched plan to another writer: [(address, value)]
        64-bit stores to make in order (a compute stream's write-value operation)."""
        st = (_Store * 4)()
        n = _int()
        _check(_plan_release_stores(self._handle(), st, 4, ctypes.byref(n)))
        return [(st[i].address, st[i].value) for i in range(n.value)]

    def consumed_store(self):
        """(address, value): the store the writer makes after its waits on the plan's
        completion; until it lands the plan counts as running (see conccl.h)."""
        st = _Store()
        _check(_plan_consumed_store(self._handle(), ctypes.byref(st)))
        return st.address, st.value

    def enqueue_on_stream(self, stream, timeout_ms=10000):
        """nv backend: order a prelaunch plan on a CUDA stream (a CUstream handle, a
        torch.cuda.Stream, or None for torch's current stream). Returns at once."""
        h = self._handle()
        timeout_ms = _integer("timeout_ms", timeout_ms, "uint32")
        _check(_plan_enqueue_stream(h, _stream_handle(stream), timeout_ms))

    def completion(self, rank):
        """(address, value): rank's data is in place once the 64-bit word at address >= value."""
        rank = _integer("rank", rank, "int")
        a, v = _u64(), _u64()
        _check(_plan_completion(self._handle(), rank, ctypes.byref(a), ctypes.byref(v)))
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
    _what = "communicator"

    QUEUES = {"auto": 0, "per_rank": 1, "per_engine": 2}

    def __init__(self, device, gpus=None, loopback=False, engines=None, timeout_ms=60000, queues="auto",
                 rank=None, nranks=None, unique_id=None, gpu=-1):
        """One process: gpus = every rank's GPU. One process per rank (docs/multiprocess.md):
        rank, nranks and unique_id (conccl.unique_id() made once, handed to every process;
        the device opened with process_slot=rank); gpu = this rank's GPU (-1: rank modulo
        the device's GPU count)."""
        dh = _device_arg(device)
        q = _choice("queues", queues, self.QUEUES)
        per_process = rank is not None or nranks is not None or unique_id is not None
        if per_process and (rank is None or nranks is None or unique_id is None or gpus is not None):
            raise Error("invalid_argument", "one process per rank: give rank, nranks and unique_id (and no gpus)")
        if not per_process and gpus is None:
            raise Error("invalid_argument", "give gpus (every rank in this process), or rank, nranks and unique_id")
        eng = _integers("engines", engines or [], "int")
        ea = (_int * max(1, len(eng)))(*eng)
        o = _CommOptions(ctypes.sizeof(_CommOptions), 0, int(bool(loopback)), ea if eng else None, len(eng),
                         _integer("timeout_ms", timeout_ms, "uint32"), q)
        h = _vp()
        if per_process:
            rank, nranks = _integer("rank", rank, "int"), _integer("nranks", nranks, "int")
            gpu = _integer("gpu", gpu, "int")
            uid = _UniqueId()
            _check(_uid_from_string(_text("unique_id", unique_id), ctypes.byref(uid)))
            device._adopt(self)
            self._device = device
            _check(_comm_create_rank(dh, rank, nranks, ctypes.byref(uid), gpu, ctypes.byref(o), ctypes.byref(h)))
            self._h = h
            self._gpus = None
            self._gpu = gpu if gpu >= 0 else rank % device.gpu_count  # as conccl_comm_create_rank picks
            return
        g = _integers("gpus", gpus, "int")
        ga = (_int * max(1, len(g)))(*g)
        device._adopt(self)
        self._device = device
        _check(_comm_create(dh, ga, _integer("number of gpus", len(g), "int"), ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        self._gpus = g

    def _size_rank(self):
        """(size, rank): fixed for the communicator's life, asked of the library once
        (calls read them several times each)."""
        h = self._handle()
        sr = self.__dict__.get("_sr")
        if sr is None:
            sr = self._sr = (_comm_size(h), _comm_rank(h))
        return sr

    size = property(lambda self: self._size_rank()[0])
    rank = property(lambda self: self._size_rank()[1], doc="this process's rank (-1: every rank in this process)")
    cached_plans = property(lambda self: _comm_cached_plans(self._handle()),
                            doc="plans the NCCL-shaped calls keep (those of the 64 most recently used argument sets)")

    def plan(self, op, nbytes, send, recv, **kw):
        return Plan(self, op, nbytes, send, recv, **kw)

    def register_window(self, buffer):
        """One process per rank: registers this rank's `buffer` as a window (every rank
        calls it, in the same order, with its own buffer). The NCCL-shaped calls then take
        views of windows (Buffer.view) at the same offsets on every rank with no message
        between the ranks per call (docs/multiprocess.md, "Windows")."""
        h = self._handle()
        if not isinstance(buffer, Buffer):
            raise Error("invalid_argument", f"register_window: give a conccl.Buffer, not {type(buffer).__name__}")
        raw = buffer._live(self._device, "buffer")
        wh = _vp()
        _check(_win_register(h, ctypes.byref(raw), ctypes.byref(wh)))
        return Window(self, wh, buffer)

    def stats(self):
        """What the communicator has done: bootstrap messages sent and received, calls,
        window calls (no message between the ranks), window plans compiled."""
        st = _CommStats()
        _check(_comm_stats(self._handle(), ctypes.byref(st)))
        return {f: int(getattr(st, f)) for f, _ in _CommStats._fields_}

    def async_error(self):
        """None, or the conccl.Error of a call through windows that failed after it returned
        (a rank died, stopped calling or refused a call), as ncclCommGetAsyncError. Once
        set, every call raises it: destroy the communicator."""
        code = _int(0)
        _check(_comm_async_error(self._handle(), ctypes.byref(code)))
        if code.value == 0:
            return None
        return Error(_status_name(code.value).decode(), _last_error().decode())

    def ranks_gone(self):
        """The ranks whose processes have gone (exited, crashed or destroyed their
        communicator), in rank order; [] with every rank in one process. Sends nothing
        and does not wait: a health check between calls."""
        h = self._handle()
        count = _int(0)
        _check(_comm_ranks_gone(h, None, 0, ctypes.byref(count)))
        while True:
            cap = count.value
            ranks = (_int * max(cap, 1))()
            _check(_comm_ranks_gone(h, ranks, cap, ctypes.byref(count)))
            if count.value <= cap:
                return [ranks[i] for i in range(count.value)]

    # NCCL-shaped calls. One process: one buffer (or tensor) per rank, in
    # lists. One process per rank: this rank's alone (a list of one, or the
    # buffer itself), as ncclAllGather; broadcast's root_send may be None off
    # the root. The C API's notes on conccl_all_gather say the rest.
    def _mine(self, name, items, single):
        """The list of buffers or tensors the C call reads: one per rank (every rank in this
        process), or this rank's alone. `single` tells one item from a list of them."""
        if self.rank < 0:
            if single(items) or not isinstance(items, (list, tuple)):
                raise Error("invalid_argument", f"{name}: give a list of one per rank (every rank is in this "
                                                f"process), not {type(items).__name__}")
            if len(items) != self.size:
                raise Error("invalid_argument", f"{name}: give one per rank ({self.size} ranks), not {len(items)}")
            return list(items)
        mine = list(items) if isinstance(items, (list, tuple)) else [items]
        if len(mine) != 1:
            raise Error("invalid_argument", f"{name}: one process per rank: give this rank's alone, not {len(mine)}")
        return mine

    def _buffers(self, name, buffers):
        return _array(name, self._mine(name, buffers, lambda b: isinstance(b, Buffer)), self._device)[0]

    def all_gather(self, send, recv, nbytes):
        h = self._handle()
        s, r = self._buffers("send", send), self._buffers("recv", recv)
        _check(_all_gather(s, r, _integer("nbytes", nbytes, "size_t"), h, None))

    def all_to_all(self, send, recv, nbytes):
        h = self._handle()
        s, r = self._buffers("send", send), self._buffers("recv", recv)
        _check(_all_to_all(s, r, _integer("nbytes", nbytes, "size_t"), h, None))

    def broadcast(self, root_send, recv=None, nbytes=None, root=0, *, src=None, stream=None):
        """Buffers: root_send (the root's buffer; None off the root with one process per
        rank) to every rank's recv, nbytes of it, from rank `root`.
        Tensors, as torch.distributed.broadcast(tensor, src): broadcast(tensor, src) with
        the second argument (or src=) the source rank; every rank's tensor gets the
        source's, in place. Lists or this rank's tensor, and `stream`, as in
        all_gather_into_tensor."""
        if _is_tensor(root_send) or (isinstance(root_send, (list, tuple)) and root_send and
                                     all(_is_tensor(t) for t in root_send)):
            if nbytes is not None or root != 0 or (src is not None and recv is not None):
                raise Error("invalid_argument", "broadcast of tensors is torch.distributed's broadcast(tensor, src): "
                                                "give the tensor(s) and src alone")
            self._tensor_call("broadcast", root_send, root_send, stream, src=recv if src is None else src)
            return
        if recv is None or nbytes is None or src is not None or stream is not None:
            raise Error("invalid_argument", "broadcast of buffers: give root_send, recv and nbytes (and root), or "
                                            "tensors as torch.distributed.broadcast(tensor, src)")
        h = self._handle()
        if root_send is not None and not isinstance(root_send, Buffer):
            raise Error("invalid_argument", f"root_send must be a conccl.Buffer (or None off the root with one "
                                            f"process per rank), not {type(root_send).__name__}")
        s = _array("root_send", [root_send], self._device)[0] if root_send is not None else None
        r = self._buffers("recv", recv)
        args = _integer("nbytes", nbytes, "size_t"), _integer("root", root, "int")
        _check(_broadcast(s, r, *args, h, None))

    def gather(self, send, *args, **kw):
        """Tensors, as torch.distributed.gather: gather(tensor, gather_list=None, dst=0, *,
        stream=None): dst's gather_list[r] gets rank r's tensor; nothing else is written.
        gather_list: on dst, world size tensors of tensor's dtype and elements, or one tensor
        of world size x them (rank r's at r x tensor's bytes); None (or []) elsewhere. A list
        whose tensors lie back to back in one storage (tensor.chunk(n), say) is written in
        place; any other list through a staging tensor and one local copy per rank.
        Buffers, as conccl_gather: gather(send, root_recv, nbytes, root=0): root_recv (nranks
        x nbytes) gets every rank r's send at r x nbytes; with one process per rank
        root_recv may be None off the root. Lists or this rank's alone, and `stream`, as in
        all_gather_into_tensor; every rank in this process gives the root's root_recv alone."""
        if _tensors(send):
            return self._gather_tensors(send, *args, **kw)
        return self._gather_buffers(send, *args, **kw)

    def scatter(self, first, *args, **kw):
        """Tensors, as torch.distributed.scatter: scatter(tensor, scatter_list=None, src=0,
        *, stream=None): rank r's tensor gets src's scatter_list[r]. scatter_list: on src,
        world size tensors like tensor, or one tensor of world size x its elements; None (or
        []) elsewhere.
        Buffers, as conccl_scatter: scatter(root_send, recv, nbytes, root=0): every rank r's
        recv gets root_send's bytes at r x nbytes; with one process per rank root_send may be
        None off the root. Lists, `stream` and the staging as in gather."""
        if _tensors(first):
            return self._scatter_tensors(first, *args, **kw)
        return self._scatter_buffers(first, *args, **kw)

    def _gather_tensors(self, tensor, gather_list=None, dst=0, *, stream=None):
        self._rooted_tensors("gather", tensor, gather_list, dst, stream=stream)

    def _scatter_tensors(self, tensor, scatter_list=None, src=0, *, stream=None):
        self._rooted_tensors("scatter", tensor, scatter_list, src, stream=stream)

    def _gather_buffers(self, send, root_recv, nbytes, root=0):
        self._rooted_buffers("gather", send, root_recv, nbytes, root)

    def _scatter_buffers(self, root_send, recv, nbytes, root=0):
        self._rooted_buffers("scatter", root_send, recv, nbytes, root)

    def _rooted_buffers(self, op, first, second, nbytes, root=0):
        """gather(send, root_recv, ...) and scatter(root_send, recv, ...) on Buffers."""
        h = self._handle()
        side_name, root_name = ("send", "root_recv") if op == "gather" else ("recv", "root_send")
        side_given, root_given = (first, second) if op == "gather" else (second, first)
        if root_given is not None and not isinstance(root_given, Buffer):
            raise Error("invalid_argument", f"{root_name} must be a conccl.Buffer (or None off the root with one "
                                            f"process per rank), not {type(root_given).__name__}")
        side = self._buffers(side_name, side_given)
        at_root = _array(root_name, [root_given], self._device)[0] if root_given is not None else None
        args = _integer("nbytes", nbytes, "size_t"), _integer("root", root, "int")
        if op == "gather":
            _check(_gather(side, at_root, *args, h, None))
        else:
            _check(_scatter(at_root, side, *args, h, None))

    def _rooted_tensors(self, op, side, root_side=None, root=0, *, stream=None):
        """gather (side: the inputs; root_side: the root's gather_list) and scatter (side:
        the outputs; root_side: the root's scatter_list), in torch.distributed's shapes."""
        # conccl.torch: with a SymmetricPool on this communicator, tensors outside it are
        # staged through the pool (as _tensor_call's).
        pools = __import__("sys").modules.get(__name__ + ".torch")
        if pools is not None and stream is not HOST and pools._staged_rooted(self, op, side, root_side, root, stream):
            return
        h = self._handle()
        n, many = self.size, self.rank < 0
        list_name, root_name = ("gather_list", "dst") if op == "gather" else ("scatter_list", "src")
        root = _integer(root_name, root, "int")
        if not 0 <= root < n:
            raise Error("invalid_argument", f"{root_name} {root}: a rank of this communicator (0..{n - 1})")
        side = self._mine("tensor", side, _is_tensor)
        dev, gpus = self._device, (self._gpus if many else [self._gpu])
        structs = [dev._tensor_buffer(t, gpus[r], f"tensor[{r}]" if many else "tensor") for r, t in enumerate(side)]
        nbytes, dtype = structs[0].size, side[0].dtype
        for r, (t, b) in enumerate(zip(side, structs)):
            if t.dtype != dtype or b.size != nbytes:
                raise Error("invalid_argument", f"every rank's tensor must have the same dtype and bytes: "
                                                f"{[(str(x.dtype), y.size) for x, y in zip(side, structs)]}")
        at_root = many or self.rank == root
        root_gpu = gpus[root] if many else self._gpu
        staged = False  # a list not back to back goes through a staging tensor
        if root_side is None or (isinstance(root_side, (list, tuple)) and len(root_side) == 0):
            if at_root:
                raise Error("invalid_argument", f"{op}: the {root_name} rank ({root}) gives {list_name}: {n} tensors "
                                                f"like tensor, or one of {n} x its elements")
            flat = None
        elif _is_tensor(root_side):
            flat = root_side
        else:
            if not at_root:
                raise Error("invalid_argument", f"{op}: {list_name} is given only on the {root_name} rank ({root}), "
                                                "as in torch.distributed")
            parts = list(root_side)
            if len(parts) != n or not all(_is_tensor(t) for t in parts):
                raise Error("invalid_argument", f"{op}: {list_name} holds one tensor per rank ({n}), "
                                                f"not {len(parts)}")
            for r, t in enumerate(parts):
                if t.dtype != dtype or t.numel() * t.element_size() != nbytes:
                    raise Error("invalid_argument", f"{list_name}[{r}] is {t.dtype} of {t.numel() * t.element_size()} "
                                                    f"bytes; every one must be tensor's {dtype} of {nbytes} bytes")
            flat = _back_to_back(parts)
            if flat is not None and not flat.is_cuda:
                try:  # on the emulated node, only if the engines reach that memory
                    dev._tensor_buffer(flat, root_gpu, list_name)
                except Error:
                    flat = None
            staged = flat is None
            if staged:
                flat = self._staging(side[0], n * side[0].numel(), root_gpu, stream)
                if op == "scatter":
                    with _on_stream(flat, stream):
                        _rows_in(flat.view(n, -1), parts)
        root_struct = None
        if flat is not None:
            if flat.dtype != dtype:
                raise Error("invalid_argument", f"{list_name} is {flat.dtype} and tensor {dtype}: give both the same "
                                                "dtype, as torch.distributed does")
            root_struct = dev._tensor_buffer(flat, root_gpu, list_name)
            if root_struct.size != n * nbytes:
                raise Error("invalid_argument", f"{list_name} as one tensor has {root_struct.size} bytes; it must be "
                                                f"world size ({n}) times tensor's {nbytes} bytes ({n * nbytes})")
        s = (_Buffer * len(structs))(*structs)
        handle = self._tensor_stream(side, stream)
        rs = ctypes.byref(root_struct) if root_struct is not None else None
        args = _integer("bytes", nbytes, "size_t"), root, h, handle
        _check(_gather(s, rs, *args) if op == "gather" else _scatter(rs, s, *args))
        if op == "gather" and staged:
            with _on_stream(flat, stream):
                _rows_out(flat.view(n, -1), root_side)

    def _staging(self, like, numel, gpu, stream):
        """A tensor of numel elements of like's dtype the library reaches: on CUDA a fresh
        one on like's device (allocated on `stream`); on the emulated node one over a new
        buffer of `gpu` (freed with the tensor)."""
        torch = _torch_mod()
        if like.is_cuda:
            with _on_stream(like, stream):
                return torch.empty(numel, dtype=like.dtype, device=like.device)
        buf = self._device.alloc(gpu, numel * like.element_size())
        t = torch.from_dlpack(buf).view(like.dtype)
        weakref.finalize(t, buf.free)
        return t

    # ---- PyTorch tensors: the torch.distributed calls' shapes ----
    # nv backend: CUDA tensors (registered as they come), ordered on a CUDA
    # stream. emu: CPU tensors that view this device's buffers
    # (torch.from_dlpack(device.alloc(gpu, nbytes))); the call returns when
    # the data is in place.
    def all_gather_into_tensor(self, output_tensor, input_tensor, *, stream=None):
        """As torch.distributed.all_gather_into_tensor(output_tensor, input_tensor):
        output_tensor (world size x input_tensor's elements, same dtype) of every rank
        gets every rank s's input_tensor at offset s x its bytes. With every rank in
        this process, give lists (rank r's tensor at [r]); with one process per rank,
        this rank's tensors. CUDA tensors: ordered on `stream` (default: torch's current
        stream): the copies start when the stream's earlier work is done, and its later
        work sees the results; the call returns at once (the host waits only when more
        calls than the library keeps in flight are outstanding)."""
        self._tensor_call("all_gather", output_tensor, input_tensor, stream)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, *, stream=None):
        """As torch.distributed.all_to_all_single(output, input) with equal splits: output
        and input have the same elements and dtype, split along dim 0 into world size
        chunks; chunk d of rank s's input goes to rank d, where it is chunk s of the
        output. Split sizes, if given, must be those equal splits. Lists or this rank's
        tensors and `stream` as in all_gather_into_tensor."""
        self._tensor_call("all_to_all", output, input, stream, (output_split_sizes, input_split_sizes))

    # ---- reductions: NCCL's calls on Buffers, torch.distributed's on tensors ----
    # Each method with two forms tells them apart by its first argument alone:
    # tensors (one, or a list of one per rank) or conccl Buffers.
    def reduce_scatter(self, send, recv, recvcount, dtype, op="sum"):
        """Buffers, as ncclReduceScatter: send holds world size x recvcount elements of
        dtype; rank r's recv gets the reduction over ranks q of q's send elements
        [r x recvcount, (r+1) x recvcount). In place with recv = send.view(r x recvcount
        x element size, recvcount x element size). Tensors: reduce_scatter_tensor."""
        if _tensors(send):
            raise Error("invalid_argument", "reduce_scatter takes conccl Buffers; for tensors call "
                                            "reduce_scatter_tensor(output, input, op), as torch.distributed")
        self._reduction(_c_reduce_scatter, "recvcount", send, recv, recvcount, dtype, op)

    def all_reduce(self, send, *args, **kw):
        """Buffers, as ncclAllReduce: all_reduce(send, recv, count, dtype, op="sum"):
        every rank's recv gets the reduction over ranks of their send's first count
        elements (in place with recv = send).
        Tensors, as torch.distributed.all_reduce: all_reduce(tensor, op="sum", *,
        stream=None): every rank's tensor becomes the reduction of all of them, in place.
        op: a conccl.RedOp, its name, or a torch.distributed.ReduceOp. Lists or this
        rank's alone, and `stream`, as in all_gather_into_tensor."""
        if _tensors(send):
            return self._all_reduce_tensor(send, *args, **kw)
        return self._all_reduce_buffers(send, *args, **kw)

    def reduce(self, send, *args, **kw):
        """Buffers, as ncclReduce: reduce(send, recv, count, dtype, op="sum", root=0):
        the root's recv gets the reduction over ranks of their send's first count
        elements; no other rank's recv is written, and with one process per rank the
        others may pass recv=None (every rank in this process: None in their places).
        Tensors, as torch.distributed.reduce: reduce(tensor, dst, op="sum", *,
        stream=None): dst's tensor becomes the reduction of every rank's, in place; the
        others' are left as they were."""
        if _tensors(send):
            return self._reduce_tensor(send, *args, **kw)
        return self._reduce_buffers(send, *args, **kw)

    def reduce_scatter_tensor(self, output, input, op="sum", *, stream=None):
        """As torch.distributed.reduce_scatter_tensor(output, input, op): input has world
        size x output's elements (same dtype); rank r's output gets the reduction over
        ranks of their input's r-th chunk of output.numel() elements."""
        self._reduction_tensors("reduce_scatter", output, input, op, stream)

    def _all_reduce_buffers(self, send, recv, count, dtype, op="sum"):
        self._reduction(_c_all_reduce, "count", send, recv, count, dtype, op)

    def _reduce_buffers(self, send, recv, count, dtype, op="sum", root=0):
        self._reduction(_c_reduce, "count", send, recv, count, dtype, op, root=root)

    def _all_reduce_tensor(self, tensor, op="sum", *, stream=None):
        self._reduction_tensors("all_reduce", tensor, tensor, op, stream)

    def _reduce_tensor(self, tensor, dst, op="sum", *, stream=None):
        self._reduction_tensors("reduce", tensor, tensor, op, stream, dst)

    def _reduction(self, fn, count_name, send, recv, count, dtype, op, root=None):
        """One C reduction on Buffers; root None for reduce_scatter and all_reduce."""
        h = self._handle()
        dt, o = _dtype_arg("dtype", dtype), _op_arg("op", op)
        count = _integer(count_name, count, "size_t")
        s = self._buffers("send", send)
        if root is None:
            _check(fn(s, self._buffers("recv", recv), count, dt, o, h, None))
            return
        root = _integer("root", root, "int")
        _check(fn(s, self._reduce_recv(recv), count, dt, o, root, h, None))

    def _reduce_recv(self, recv):
        """reduce's recv: None (or [None]) for no buffer with one process per rank; with
        every rank in this process a list of one per rank, None for a struct of zeros
        (the library refuses that on the root, naming it)."""
        if self.rank >= 0:
            if recv is None or (isinstance(recv, (list, tuple)) and len(recv) == 1 and recv[0] is None):
                return None
            return self._buffers("recv", recv)
        items = self._mine("recv", recv, lambda b: isinstance(b, Buffer) or b is None)
        structs = []
        for i, b in enumerate(items):
            if b is not None and not isinstance(b, Buffer):
                raise Error("invalid_argument", f"recv[{i}] must be a conccl.Buffer or None, not {type(b).__name__}")
            structs.append(_Buffer() if b is None else b._live(self._device, f"recv[{i}]"))
        return (_Buffer * len(structs))(*structs)

    def _reduction_tensors(self, op, outputs, inputs, redop, stream, dst=None):
        """op "all_reduce", "reduce" (outputs and inputs the same tensors) or
        "reduce_scatter"."""
        h = self._handle()
        n = self.size
        call, onames = {"all_reduce": ("all_reduce", ("tensor", "tensor")),
                        "reduce_scatter": ("reduce_scatter_tensor", ("output", "input")),
                        "reduce": ("reduce", ("tensor", "tensor"))}[op]
        o = _op_arg("op", redop)
        if op == "reduce":
            dst = _integer("dst", dst, "int")
            if not 0 <= dst < n:
                raise Error("invalid_argument", f"dst {dst}: a rank of this communicator (0..{n - 1})")
        outputs, inputs = self._mine(onames[0], outputs, _is_tensor), self._mine(onames[1], inputs, _is_tensor)
        many = self.rank < 0
        dt = _tensor_dtype(onames[1] + ("[0]" if many else ""), inputs[0])
        count = outputs[0].numel()
        for r, (out, inp) in enumerate(zip(outputs, inputs)):
            where = f" (rank {r})" if many else ""
            if out.dtype != inp.dtype:
                raise Error("invalid_argument", f"{onames[0]} is {out.dtype} and {onames[1]} {inp.dtype}{where}: give "
                                                "both the same dtype, as torch.distributed does")
            if inp.dtype != inputs[0].dtype:
                raise Error("invalid_argument", f"{onames[1]}{where} is {inp.dtype} and rank 0's {inputs[0].dtype}: "
                                                "give every rank's tensors one dtype")
            if out.numel() != count:
                raise Error("invalid_argument", f"every rank's {onames[0]} must have the same elements: "
                                                f"{[t.numel() for t in outputs]}")
            if op == "reduce_scatter" and inp.numel() != n * count:
                raise Error("invalid_argument", f"input{where} has {inp.numel()} elements; it must be world size "
                                                f"({n}) times output's {count} ({n * count}), as in "
                                                f"torch.distributed.{call}")
        if count == 0:
            return  # torch.distributed does nothing for empty tensors; the library refuses count 0
        dev = self._device
        gpus = [self._gpu] if self.rank >= 0 else self._gpus

        def structs(name, tensors):
            return [dev._tensor_buffer(t, gpus[r], f"{name}[{r}]" if many else name) for r, t in enumerate(tensors)]

        s = (_Buffer * len(inputs))(*structs(onames[1], inputs))
        handle = self._tensor_stream(inputs, stream)
        if op == "reduce":
            # With one process per rank only dst receives: the others pass no recv, as
            # NCCL's ncclReduce ignores theirs. In one process every rank's tensor is
            # passed (the library writes only dst's).
            r = None if self.rank >= 0 and self.rank != dst else s
            _check(_c_reduce(s, r, count, dt, o, dst, h, handle))
            return
        if op == "all_reduce":
            _check(_c_all_reduce(s, s, count, dt, o, h, handle))
            return
        r = (_Buffer * len(outputs))(*structs(onames[0], outputs))
        _check(_c_reduce_scatter(s, r, count, dt, o, h, handle))

    def _tensor_call(self, op, outputs, inputs, stream, splits=(None, None), src=None):
        """op "all_gather", "all_to_all" or "broadcast" (outputs and inputs the same tensors)."""
        # conccl.torch: with a SymmetricPool on this communicator, tensors outside it are
        # staged through the pool (copy in, call through its window, copy out).
        pools = __import__("sys").modules.get(__name__ + ".torch")
        if pools is not None and stream is not HOST and pools._staged_call(self, op, outputs, inputs, stream, splits,
                                                                            src):
            return
        h = self._handle()
        n = self.size
        call, onames = {"all_gather": ("all_gather_into_tensor", ("output_tensor", "input_tensor")),
                        "all_to_all": ("all_to_all_single", ("output", "input")),
                        "broadcast": ("broadcast", ("tensor", "tensor"))}[op]
        if op == "broadcast":
            src = _integer("src", src, "int")
            if not 0 <= src < n:
                raise Error("invalid_argument", f"src {src}: a rank of this communicator (0..{n - 1})")
        outputs, inputs = self._mine(onames[0], outputs, _is_tensor), self._mine(onames[1], inputs, _is_tensor)
        dev = self._device
        gpus = [self._gpu] if self.rank >= 0 else self._gpus
        many = self.rank < 0

        def structs(name, tensors):
            return [dev._tensor_buffer(t, gpus[r], f"{name}[{r}]" if many else name) for r, t in enumerate(tensors)]

        send, recv = structs(onames[1], inputs), structs(onames[0], outputs)
        isize = send[0].size
        for r, (o, i) in enumerate(zip(outputs, inputs)):
            where = f" (rank {r})" if many else ""
            if o.dtype != i.dtype:
                raise Error("invalid_argument", f"{onames[0]} is {o.dtype} and {onames[1]} {i.dtype}{where}: "
                                                "give both the same dtype, as torch.distributed does")
            if send[r].size != isize:
                raise Error("invalid_argument", f"every rank's {onames[1]} must have the same bytes: "
                                                f"{[b.size for b in send]}")
            want = isize * n if op == "all_gather" else isize
            if recv[r].size != want:
                rule = (f"world size ({n}) times" if op == "all_gather" else "the same as")
                raise Error("invalid_argument", f"{onames[0]}{where} has {recv[r].size} bytes; it must be {rule} "
                                                f"{onames[1]}'s {isize} bytes ({want}), as in torch.distributed.{call}")
        nbytes = isize
        if op == "broadcast":
            r = (_Buffer * len(recv))(*recv)
            mine = self.rank < 0 or self.rank == src
            root = ctypes.byref(send[src if self.rank < 0 else 0]) if mine else None
            handle = self._tensor_stream(inputs, stream)
            _check(_broadcast(root, r, _integer("bytes", nbytes, "size_t"), src, h, handle))
            return
        if op == "all_to_all":
            rows = inputs[0].shape[0] if len(inputs[0].shape) else None
            if rows is None or rows % n or isize % n:
                raise Error("invalid_argument", f"{onames[1]}'s dim 0 ({rows}) does not split into {n} equal "
                                                f"chunks (one per rank), as {call} needs")
            for sname, sizes in zip(("output_split_sizes", "input_split_sizes"), splits):
                if sizes is not None and _integers(sname, sizes, "int") != [rows // n] * n:
                    raise Error("invalid_argument", f"{sname} {list(sizes)}: only equal splits ({[rows // n] * n}, "
                                                    "or None) are supported")
            nbytes = isize // n
        s = (_Buffer * len(send))(*send)
        r = (_Buffer * len(recv))(*recv)
        fn = _all_gather if op == "all_gather" else _all_to_all
        _check(fn(s, r, _integer("bytes", nbytes, "size_t"), h, self._tensor_stream(inputs, stream)))

    @staticmethod
    def _tensor_stream(tensors, stream):
        """CPU tensors (emu) take no stream unless one is given (the library then refuses
        it); CUDA tensors `stream`, or torch's current stream; conccl.HOST none."""
        if stream is HOST:
            return None
        cpu = not getattr(tensors[0], "is_cuda", False)
        return None if cpu and stream is None else _stream_handle(stream)


class Window:
    """A registered window (Communicator.register_window): `buffer` is this rank's. close()
    (or deregister()) deregisters it: collective, every rank in the same order, once the
    calls that use it have ended; so does leaving a `with`. A window dies with its
    communicator (and so with its device): closing it afterwards does nothing."""

    def __init__(self, comm, handle, buffer):
        self._comm = comm
        self._h = handle
        self.buffer = buffer

    @property
    def registered(self):
        """Whether the window is still registered (not closed, its communicator alive)."""
        return bool(self._h) and bool(self._comm._h)

    def _live(self):
        if not self._h:
            raise Error("invalid_argument", "this window was deregistered")
        if not self._comm._h:
            raise Error("invalid_argument", f"this window's communicator {self._comm._gone} (its windows went with it)")

    def view(self, offset, nbytes):
        """This rank's bytes [offset, offset + nbytes) of the window, for the calls."""
        self._live()
        return self.buffer.view(offset, nbytes)

    def close(self):
        if not self._h:
            return
        if not self._comm._h:  # destroyed with its communicator
            self._h = None
            return
        _check(_win_deregister(self._comm._h, self._h))  # on failure still registered: close() again
        self._h = None

    deregister = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        try:
            size = f"{self.buffer.size} bytes"
        except Error:
            size = "a freed buffer"
        return f"<conccl.Window of {size}, {'registered' if self.registered else 'closed'}>"


def _is_tensor(t):
    return hasattr(t, "data_ptr")


def _tensors(x):
    """Whether x is a tensor, or a non-empty list of them (one per rank)."""
    return _is_tensor(x) or (isinstance(x, (list, tuple)) and len(x) > 0 and all(_is_tensor(t) for t in x))


def _torch_mod():
    import torch
    return torch


def _rows_in(rows, parts):
    """The root's side of a scatter into `rows` (one row per rank): a list of tensors,
    one per row, or one tensor of all of them."""
    if _is_tensor(parts):
        rows.copy_(parts.reshape(rows.shape))
    else:
        for r, x in enumerate(parts):
            rows[r].copy_(x.reshape(-1))


def _rows_out(rows, parts):
    """A gather's `rows` (one row per rank) out to the root's side, as _rows_in takes it."""
    if _is_tensor(parts):
        parts.copy_(rows.view(parts.shape))
    else:
        for r, x in enumerate(parts):
            x.copy_(rows[r].view(x.shape))


def _back_to_back(parts):
    """One 1-D tensor over `parts` when they lie back to back in one storage, in order
    (tensor.chunk(n) or unbind(0) of a contiguous tensor); else None."""
    first = parts[0]
    if not all(t.is_contiguous() and t.device == first.device for t in parts):
        return None
    step = first.numel() * first.element_size()
    if any(t.data_ptr() != first.data_ptr() + r * step for r, t in enumerate(parts)):
        return None
    try:  # a view of first's storage: refused when the others lie outside it (another storage)
        return first.as_strided((first.numel() * len(parts),), (1,))
    except RuntimeError:
        return None


def _on_stream(t, stream):
    """torch's copies of a CUDA call's staging go on the call's stream: `stream` (a
    torch.cuda.Stream or a CUstream handle), or torch's current one when None."""
    import contextlib
    if not getattr(t, "is_cuda", False) or stream is None:
        return contextlib.nullcontext()
    torch = _torch_mod()
    if not isinstance(stream, torch.cuda.Stream):
        stream = torch.cuda.ExternalStream(_integer("stream", stream, "uint64"))
    return torch.cuda.stream(stream)


class _HostOrder:
    def __repr__(self):
        return "conccl.HOST"


# stream=conccl.HOST: a tensor call on CUDA tensors ordered on the host instead of a
# stream, as Buffer calls are: it starts at once (the tensors' producers must have
# finished: synchronize first) and returns when this rank's data is in place. Only for
# tensors the library reaches as they are (a SymmetricPool's, a registered window's):
# nothing is staged. No stream waits on another process's work, so processes sharing a
# GPU without MPS do not hand it to each other for a time slice per call (conccl.torch's
# send/recv, docs/torch-backend.md).
HOST = _HostOrder()


def _stream_handle(stream):
    """A CUstream for the C API: a torch.cuda.Stream, an int handle, or None for torch's
    current stream; the legacy default stream (handle 0) becomes CU_STREAM_LEGACY."""
    if stream is None:
        import torch
        stream = torch.cuda.current_stream()
    h = _integer("stream", getattr(stream, "cuda_stream", stream), "uint64")
    return _vp(h or CU_STREAM_LEGACY)
