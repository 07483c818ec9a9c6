/* conccl/conccl.h - the C API of ConCCL: devices, buffers, queues, signals,
 * communicators and plans, for C transports (RCCL, UCX plugins), for the
 * Python package (python/conccl, ctypes) and for anything that cannot take a
 * C++ ABI.
 *
 * Conventions:
 *  - Every call returns a conccl_status (CONCCL_OK = 0). On an error,
 *    conccl_last_error() gives the message the C++ Status carries (what went
 *    wrong and the fix), valid on the calling thread until its next call.
 *  - Handles are opaque values (never pointers into the library's memory).
 *    Destroying NULL is a no-op that returns CONCCL_OK. A handle that was
 *    destroyed (a double destroy, a use after destroy), or a handle of one
 *    kind given for another, is CONCCL_ERR_INVALID_ARGUMENT with a message
 *    saying so; calls that return a value (conccl_signal_value, ...) return
 *    0 (or -1 for conccl_comm_rank) and set conccl_last_error().
 *  - Lifetimes: any destruction order is safe.
 *     - Closing a device destroys what is left of its queues, signals,
 *       communicators and buffers; their handles then stop working, as if
 *       destroyed.
 *     - Destroying a communicator detaches its plans: each plan's launch is
 *       waited for (up to 10 s), and the plan handle stays valid, but its
 *       calls fail with CONCCL_ERR_INVALID_ARGUMENT naming the destroyed
 *       communicator; conccl_plan_destroy still releases it.
 *    Destroy children first to see their errors. Do not destroy or close a
 *    handle while another thread is in a call on it or on one of its
 *    children.
 *  - Buffers: a conccl_buffer is checked against the device's allocations
 *    wherever one is passed in. Pass the struct an allocation returned, or a
 *    sub-range of it (va and host moved by the same offset, size within the
 *    allocation); a freed buffer, another device's buffer or an enlarged or
 *    altered struct is CONCCL_ERR_INVALID_ARGUMENT. A buffer's id is never
 *    reused, so a stale struct never names a newer buffer at the same
 *    address.
 *  - Argument structs begin with `struct_size`: set it to sizeof(the struct)
 *    (the *_init() helpers do), so later versions can add fields at the end.
 *  - Every wait takes a timeout in milliseconds; nothing blocks forever.
 *  - No C++ exception and no abort crosses this interface: an unexpected
 *    C++ exception becomes CONCCL_ERR_INTERNAL with its message.
 *
 * A communicator holds every rank in one process (ranks on the GPUs of one
 * device; several ranks may share a GPU with `loopback`), or one rank per
 * process (conccl_comm_create_rank, docs/multiprocess.md). See
 * docs/getting-started.md and examples/.
 */
#ifndef CONCCL_CONCCL_H
#define CONCCL_CONCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: destroy and close calls and conccl_signal_add return conccl_status;
 * handles are checked; buffers are checked against their allocation.
 * 4: reductions (conccl_reduce_scatter, conccl_all_reduce, conccl_reduce);
 * only additions, so callers built against 3 keep working.
 * 5: conccl_op_name, conccl_datatype_name, conccl_redop_name (additions).
 * 6: collectives across nodes, conccl_hier_* and conccl_internode (additions). */
#define CONCCL_C_API_VERSION 6

typedef enum conccl_status {
  CONCCL_OK = 0,
  CONCCL_ERR_INVALID_ARGUMENT = 1, /* the call is malformed: fix the call */
  CONCCL_ERR_OUT_OF_RANGE = 2,     /* a value does not fit its field or limit */
  CONCCL_ERR_NOT_FOUND = 3,        /* a GPU, engine or buffer that does not exist */
  CONCCL_ERR_TIMEOUT = 4,          /* a deadline passed; the message diagnoses the hang */
  CONCCL_ERR_DEVICE_FAULT = 5,     /* an engine reported a fault */
  CONCCL_ERR_UNAVAILABLE = 6,      /* backend or driver not present here */
  CONCCL_ERR_RESOURCE_EXHAUSTED = 7,
  CONCCL_ERR_BUSY = 8,             /* e.g. a plan still running */
  CONCCL_ERR_VERIFY_FAILED = 9,
  CONCCL_ERR_INTERNAL = 10         /* a bug in ConCCL: please report */
} conccl_status;

/* The message of the last error on this thread ("" after a success). */
const char* conccl_last_error(void);
/* "ok", "invalid_argument", ... */
const char* conccl_status_name(conccl_status status);
/* The library's version, "MAJOR.MINOR.PATCH". */
const char* conccl_version(void);

typedef struct conccl_device* conccl_device_t;
typedef struct conccl_queue* conccl_queue_t;
typedef struct conccl_signal* conccl_signal_t;
typedef struct conccl_comm* conccl_comm_t;
typedef struct conccl_plan* conccl_plan_t;

/* ---- devices ------------------------------------------------------------ */
typedef struct conccl_device_options {
  size_t struct_size;
  const char* backend;    /* "emu" (NULL = "emu"), "kfd", "nv" */
  /* DEPRECATED (#30): the emulator's shape as fields. Give the same keys in
   * `settings` instead - settings = "preset=small gpus=4 engines=2 gen=6.0
   * memory_per_gpu=64M" - and leave these as conccl_device_options_init
   * sets them (NULL/0). They still work - for backend "emu" each one set
   * becomes the setting of its name (both may be given when they agree) -
   * and stay where they are: the layout is the ABI.
   * No deprecated attribute: Clang would warn wherever C++ code merely copies
   * the struct (its implicit copy constructor names every member). */
  const char* preset;     /* deprecated: settings "preset=..." ("mi300x", "small", "h200"; NULL = default) */
  int gpus;               /* deprecated: settings "gpus=N" (0 = the preset's) */
  int engines;            /* deprecated: settings "engines=K" (0 = the preset's) */
  const char* gen;        /* deprecated: settings "gen=..." (SDMA generation, "4.4.2", ...; NULL = the preset's) */
  size_t memory_per_gpu;  /* deprecated: settings "memory_per_gpu=..." (bytes, K/M/G suffixes; 0 = default) */
  int process_slot;       /* one process per rank: 0..15, distinct per process (the rank); -1 (init) = none */
  /* The backend's own settings, "key=value" words separated by spaces (NULL =
   * none); each backend refuses keys it does not know (docs/backends.md), e.g.
   * "preset=small gpus=4" for emu, "interrupt_waits=0 gpus=0,0" for nv,
   * "trap=off" for kfd. */
  const char* settings;
} conccl_device_options;
void conccl_device_options_init(conccl_device_options* options);

conccl_status conccl_device_open(const conccl_device_options* options, conccl_device_t* device);
/* Closes the device and whatever of it is left (see Lifetimes above). */
conccl_status conccl_device_close(conccl_device_t device);
conccl_status conccl_device_gpu_count(conccl_device_t device, int* count);
/* The engine ids of `gpu` (what conccl_queue_create takes): up to `capacity`
 * written to `ids`, the total in *count. */
conccl_status conccl_device_engines(conccl_device_t device, int gpu, int* ids, int capacity, int* count);
/* The topology as JSON (the `sdma-probe list --json` form). Writes up to
 * `capacity` bytes including the terminating 0; *needed gets the full size. */
conccl_status conccl_device_topology_json(conccl_device_t device, char* buf, size_t capacity, size_t* needed);

/* ---- buffers ------------------------------------------------------------ */
typedef enum conccl_mem_kind {
  CONCCL_MEM_DEVICE = 0,
  CONCCL_MEM_HOST = 1,
  CONCCL_MEM_CUDA = 2 /* CUDA memory of the GPU (conccl_buffer_alloc_cuda/register_cuda): va is CUDA's pointer */
} conccl_mem_kind;
/* Memory engines can address. `va` goes into commands; `host` is the CPU's
 * mapping of the same bytes, or NULL where the CPU cannot see them (NVIDIA
 * HBM): use conccl_buffer_upload/download there. */
typedef struct conccl_buffer {
  uint64_t va;
  void* host;
  size_t size;
  int gpu;  /* owning GPU; -1 for host memory */
  int kind; /* conccl_mem_kind */
  uint64_t id; /* this allocation's serial: unique in the process, never reused */
} conccl_buffer;

/* Zeroed memory on `gpu` (device) or host memory every GPU reaches (gpu ignored);
 * CONCCL_MEM_CUDA: as conccl_buffer_alloc_cuda (backend "nv"). */
conccl_status conccl_buffer_alloc(conccl_device_t device, int gpu, size_t bytes, conccl_mem_kind kind,
                                  conccl_buffer* buffer);
/* The buffer as allocated (not a sub-range). Plans that name it can no
 * longer launch (CONCCL_ERR_INVALID_ARGUMENT names the freed buffer): make
 * new ones. */
conccl_status conccl_buffer_free(conccl_device_t device, const conccl_buffer* buffer);
/* buffer[offset, offset+bytes) = src, through a copy engine when the CPU
 * cannot see the buffer. */
conccl_status conccl_buffer_upload(conccl_device_t device, const conccl_buffer* buffer, size_t offset,
                                   const void* src, size_t bytes, uint32_t timeout_ms);
/* dst = buffer[offset, offset+bytes). */
conccl_status conccl_buffer_download(conccl_device_t device, void* dst, const conccl_buffer* buffer, size_t offset,
                                     size_t bytes, uint32_t timeout_ms);

/* ---- CUDA memory (backend "nv") -------------------------------------------
 * CUDA VMM memory the engines use at CUDA's own pointer, so that kernels,
 * PyTorch tensors and collectives share it. Other backends: UNAVAILABLE. */
/* cuMemCreate'd memory (POSIX-fd handle type) on `gpu`, registered; freed by
 * conccl_buffer_free. Contents undefined. */
conccl_status conccl_buffer_alloc_cuda(conccl_device_t device, int gpu, size_t bytes, conccl_buffer* buffer);
/* CUDA's pointer to a conccl_buffer_alloc_cuda buffer, for CUDA calls and
 * kernels. It equals buffer->va, except on a device opened with a
 * process_slot (one process per rank), where the memory is imported into the
 * slot's window and va is that address. */
conccl_status conccl_buffer_cuda_pointer(conccl_device_t device, const conccl_buffer* buffer, uint64_t* ptr);
/* Registers [ptr, ptr+bytes) of CUDA memory allocated with cuMemCreate and
 * the POSIX-fd handle type (PyTorch with expandable_segments:True; plain
 * cudaMalloc memory is refused). Registrations are counted: unregister each
 * one, before CUDA frees the memory. */
conccl_status conccl_buffer_register_cuda(conccl_device_t device, int gpu, uint64_t ptr, size_t bytes,
                                          conccl_buffer* buffer);
conccl_status conccl_buffer_unregister_cuda(conccl_device_t device, const conccl_buffer* buffer);
/* The CUDA device ordinal of `gpu` (for DLPack and torch.device). */
conccl_status conccl_device_cuda_ordinal(conccl_device_t device, int gpu, int* ordinal);

/* ---- signals: 64-bit counters engines add to and wait on ---------------- */
conccl_status conccl_signal_create(conccl_device_t device, uint64_t initial, conccl_signal_t* signal);
conccl_status conccl_signal_destroy(conccl_signal_t signal);
uint64_t conccl_signal_value(conccl_signal_t signal);
conccl_status conccl_signal_add(conccl_signal_t signal, uint64_t delta); /* from the host */
/* Until value >= v or the timeout (CONCCL_ERR_TIMEOUT with a diagnosis). */
conccl_status conccl_signal_wait(conccl_signal_t signal, uint64_t v, uint32_t timeout_ms);
/* The 64-bit word to wait on from a compute stream (cu/hipStreamWaitValue64
 * with GEQ): value >= v there means the signal reached v. */
uint64_t conccl_signal_address(conccl_signal_t signal);

/* ---- queues: one ring on one engine ------------------------------------- */
typedef struct conccl_queue_options {
  size_t struct_size;
  size_t ring_bytes; /* 0 = default */
} conccl_queue_options;
void conccl_queue_options_init(conccl_queue_options* options);

conccl_status conccl_queue_create(conccl_device_t device, int gpu, int engine, const conccl_queue_options* options,
                                  conccl_queue_t* queue);
conccl_status conccl_queue_destroy(conccl_queue_t queue);
/* Recording: commands go to the queue's pending list (in its instruction
 * set: SDMA packets or Hopper copy-engine methods) until conccl_queue_submit.
 * Each is all-or-nothing. */
conccl_status conccl_queue_copy(conccl_queue_t queue, uint64_t dst, uint64_t src, uint64_t bytes);
conccl_status conccl_queue_fill(conccl_queue_t queue, uint64_t dst, uint32_t value, uint64_t bytes);
/* The signal must be of the queue's device (else CONCCL_ERR_INVALID_ARGUMENT). */
conccl_status conccl_queue_signal_add(conccl_queue_t queue, conccl_signal_t signal, uint64_t delta);
/* The engine waits until the signal's value >= v (C++ CommandBuffer::wait_ge,
 * Signal::wait_ge; Python Queue.wait_ge). */
conccl_status conccl_queue_wait_ge(conccl_queue_t queue, conccl_signal_t signal, uint64_t v);
/* conccl_queue_wait_ge under its first name. */
conccl_status conccl_queue_wait_signal(conccl_queue_t queue, conccl_signal_t signal, uint64_t v);
/* Hands the pending commands to the engine; *ticket (may be NULL) is done
 * when conccl_queue_completed() >= it. */
conccl_status conccl_queue_submit(conccl_queue_t queue, uint32_t timeout_ms, uint64_t* ticket);
/* Until the queue completed `ticket` (UINT64_MAX: everything submitted). */
conccl_status conccl_queue_wait(conccl_queue_t queue, uint64_t ticket, uint32_t timeout_ms);
uint64_t conccl_queue_completed(conccl_queue_t queue);
/* Bytes of the pending commands (0 after submit). */
size_t conccl_queue_pending_bytes(conccl_queue_t queue);

/* ---- communicators and plans --------------------------------------------- */
typedef enum conccl_op {
  CONCCL_P2P = 0,
  CONCCL_BROADCAST = 1,
  CONCCL_GATHER = 2,
  CONCCL_SCATTER = 3,
  CONCCL_ALL_GATHER = 4,
  CONCCL_ALL_TO_ALL = 5
} conccl_op;
typedef enum conccl_variant {
  CONCCL_VARIANT_AUTO = 0,
  CONCCL_VARIANT_PCPY = 1,
  CONCCL_VARIANT_BCST = 2,
  CONCCL_VARIANT_B2B = 3,
  CONCCL_VARIANT_SWAP = 4,
  CONCCL_VARIANT_FANOUT = 5,
  CONCCL_VARIANT_CHAIN = 6,
  CONCCL_VARIANT_STRIPED = 7,
  CONCCL_VARIANT_SINGLE = 8,
  CONCCL_VARIANT_PULL = 9
} conccl_variant;
/* "auto", "pcpy", ... ("?" for a number that is no variant) */
const char* conccl_variant_name(conccl_variant variant);
/* "p2p", "broadcast", "gather", "scatter", "allgather", "alltoall" ("?": none) */
const char* conccl_op_name(conccl_op op);

/* Communicator::Options::QueueSharing (docs/collectives.md "Loopback"). */
typedef enum conccl_queue_sharing {
  CONCCL_QUEUES_AUTO = 0,      /* one queue per engine for the GPU's ranks, unless the plan's lists wait on each other */
  CONCCL_QUEUES_PER_RANK = 1,  /* each rank its own queue per engine */
  CONCCL_QUEUES_PER_ENGINE = 2 /* always shared; variants whose lists wait on each other are refused */
} conccl_queue_sharing;
typedef struct conccl_comm_options {
  size_t struct_size;
  size_t ring_bytes;   /* per (rank, engine) queue; 0 = default */
  int loopback;        /* several ranks may share a GPU */
  const int* engines;  /* engine ids plans may use (NULL: all) */
  int num_engines;
  uint32_t timeout_ms; /* the NCCL-shaped calls' deadline (0 = 60000) */
  int queues;          /* conccl_queue_sharing: which queues loopback ranks use */
} conccl_comm_options;
void conccl_comm_options_init(conccl_comm_options* options);

/* gpus[r] is rank r's GPU. */
conccl_status conccl_comm_create(conccl_device_t device, const int* gpus, int nranks,
                                 const conccl_comm_options* options, conccl_comm_t* comm);
/* Detaches the communicator's plans (see Lifetimes above). */
conccl_status conccl_comm_destroy(conccl_comm_t comm);
int conccl_comm_size(conccl_comm_t comm);
/* How many plans the NCCL-shaped calls keep for reuse. They keep those of
 * the 64 most recently used argument sets (op, size, root, buffers, stream
 * or not); older ones are destroyed once no launch of theirs runs. */
size_t conccl_comm_cached_plans(conccl_comm_t comm);

/* One process per rank (docs/multiprocess.md), as ncclGetUniqueId and
 * ncclCommInitRank: one process makes the id and hands it to all; each
 * opens its device with its own process_slot and calls
 * conccl_comm_create_rank, which returns once every rank has joined (or
 * fails by options->timeout_ms, naming the missing ranks). Plans are then
 * made by every rank in the same order, each giving its own buffers
 * (nsend/nrecv 1), and every rank waits for every launch. The NCCL-shaped
 * calls below take this rank's buffers alone there (see them). */
typedef struct conccl_unique_id {
  uint8_t bytes[128];
} conccl_unique_id;
conccl_status conccl_get_unique_id(conccl_unique_id* id);
/* "conccl-uid-" + 32 hex digits (43 characters and a NUL: give 44 bytes). */
conccl_status conccl_unique_id_to_string(const conccl_unique_id* id, char* buf, size_t capacity);
conccl_status conccl_unique_id_from_string(const char* text, conccl_unique_id* id);
/* gpu: this rank's GPU on the device (-1: rank modulo the GPU count). */
conccl_status conccl_comm_create_rank(conccl_device_t device, int rank, int nranks, const conccl_unique_id* id, int gpu,
                                      const conccl_comm_options* options, conccl_comm_t* comm);
/* This process's rank; -1 for a communicator of one process. */
int conccl_comm_rank(conccl_comm_t comm);

/* ---- windows, counting, asynchronous errors (one process per rank) -------
 * A window is one buffer per rank, registered once by every rank together
 * (docs/multiprocess.md, "Windows"). The NCCL-shaped calls below take
 * buffers that lie inside windows, at the same offsets on every rank, with
 * no message between the ranks per call: each rank finds the peers' buffers
 * at the same offsets of their windows, and the ranks' streams and copy
 * engines order the call through counters in shared memory. Every rank must
 * pass window buffers for a call, or none must. */
typedef struct conccl_window* conccl_window_t;
/* Collective: every rank, in the same order, each with its own buffer. */
conccl_status conccl_comm_window_register(conccl_comm_t comm, const conccl_buffer* buffer, conccl_window_t* window);
/* Collective; waits for the calls that use the window; the handle is then invalid. */
conccl_status conccl_comm_window_deregister(conccl_comm_t comm, conccl_window_t window);

typedef struct conccl_comm_stats {
  uint64_t bootstrap_messages_sent;     /* over the bootstrap sockets, since the communicator was made */
  uint64_t bootstrap_messages_received;
  uint64_t calls;         /* NCCL-shaped calls that went through windows, and other C++ Communicator::call calls */
  uint64_t window_calls;  /* of them, those made through windows (no message between the ranks) */
  uint64_t window_plans;  /* plans compiled for window calls (once per distinct call) */
} conccl_comm_stats;
conccl_status conccl_comm_get_stats(conccl_comm_t comm, conccl_comm_stats* stats);
/* As ncclCommGetAsyncError: *async_status is CONCCL_OK, or the first error
 * of a call through windows that failed after it returned (a rank died,
 * stopped calling or refused the call; conccl_last_error() then says which).
 * Once set, every call on the communicator returns it: destroy it. */
conccl_status conccl_comm_get_async_error(conccl_comm_t comm, conccl_status* async_status);
/* The ranks whose processes have gone (their bootstrap socket hung up: the
 * process exited, crashed or destroyed its communicator), in rank order:
 * *count of them, the first min(*count, capacity) written to ranks (ranks may
 * be NULL when capacity is 0: *count alone). It sends nothing and does not
 * wait. Every rank in one process: *count is 0. */
conccl_status conccl_comm_get_ranks_gone(conccl_comm_t comm, int* ranks, int capacity, int* count);

typedef struct conccl_collective_args {
  size_t struct_size;
  conccl_op op;
  conccl_variant variant;
  uint64_t bytes;              /* per-rank chunk (docs/collectives.md) */
  int root;                    /* broadcast/gather/scatter root; p2p source */
  int peer;                    /* p2p destination */
  const conccl_buffer* send;   /* per rank (nsend entries; the root's alone for broadcast/scatter/p2p) */
  int nsend;
  const conccl_buffer* recv;   /* per rank */
  int nrecv;
  int prelaunch;               /* gate every list behind the plan's trigger */
  int timestamps;              /* each list ends with an engine timestamp */
} conccl_collective_args;
void conccl_collective_args_init(conccl_collective_args* args);

/* Buffers are checked here (see Buffers above), and again at every launch:
 * a buffer freed since makes the launch fail, naming it. */
conccl_status conccl_plan_create(conccl_comm_t comm, const conccl_collective_args* args, conccl_plan_t* plan);
conccl_status conccl_plan_destroy(conccl_plan_t plan);
conccl_status conccl_plan_launch(conccl_plan_t plan, uint32_t timeout_ms);
conccl_status conccl_plan_prelaunch(conccl_plan_t plan, uint32_t timeout_ms);
conccl_status conccl_plan_release(conccl_plan_t plan);
conccl_status conccl_plan_wait(conccl_plan_t plan, uint32_t timeout_ms);
conccl_variant conccl_plan_variant(conccl_plan_t plan);
/* Rank `rank`'s receive buffer is complete once the 64-bit word at *address
 * is >= *value (cu/hipStreamWaitValue64 with GEQ, or a host poll). */
conccl_status conccl_plan_completion(conccl_plan_t plan, int rank, uint64_t* address, uint64_t* value);
/* Hands the release of a prelaunched plan to another writer (a compute
 * stream, another process): up to `capacity` 64-bit stores written to
 * `stores`, their number in *count; make them in that order (for instance
 * hipStreamWriteValue64 after the work the sources depend on). The plan then
 * counts as released: conccl_plan_wait works as after conccl_plan_release. */
typedef struct conccl_store {
  uint64_t address;
  uint64_t value;
} conccl_store;
conccl_status conccl_plan_release_by_stores(conccl_plan_t plan, conccl_store* stores, int capacity, int* count);
/* After conccl_plan_release_by_stores: the store the writer makes once it no
 * longer waits on this launch's completion (after its last wait on the
 * conccl_plan_completion words). Until it lands the plan counts as running,
 * and conccl_plan_wait waits for it too: a relaunch resets the completion
 * words, which would strand a stream still about to wait on them. */
conccl_status conccl_plan_consumed_store(conccl_plan_t plan, conccl_store* store);
/* Backend "nv": orders a plan compiled with `prelaunch` on a CUDA stream
 * (CUstream; NULL is the legacy default stream): the stream releases it when
 * its prior work is done, and its later work waits until every rank's data is
 * in place. Returns at once; conccl_plan_wait tells when it is done. */
conccl_status conccl_plan_enqueue_on_stream(conccl_plan_t plan, void* stream, uint32_t timeout_ms);
/* The plan's command lists, decoded, as text (the `describe` form). */
conccl_status conccl_plan_describe(conccl_plan_t plan, char* buf, size_t capacity, size_t* needed);

/* ---- NCCL-shaped calls: plan, launch and wait in one call ----------------
 * send/recv hold one buffer per rank (for broadcast the root's send alone).
 * Plans are cached per communicator by their arguments, so a repeated call
 * does not plan again.
 * stream NULL: the call returns when the data is in place.
 * stream a CUstream (backend "nv"; CU_STREAM_LEGACY, (void*)1, for the legacy
 * default stream, since NULL means no stream): the call is ordered on it, as
 * conccl_plan_enqueue_on_stream does, and returns at once: the copies start
 * when the stream's prior work is done, and the stream's later work sees the
 * data. Up to 4 launches of the same call may be in flight; a fifth waits
 * (on the host, within the communicator's timeout) for the oldest. Other
 * backends refuse a stream (UNAVAILABLE).
 * One process per rank (conccl_comm_create_rank): as ncclAllGather, send and
 * recv point at this rank's buffer alone (broadcast: root_send is read on
 * the root; other ranks may pass NULL), and every rank makes the same calls
 * in the same order. A cached plan is used only when every rank has one from
 * the same earlier call (buffers that changed on any rank make all plan
 * again). On a stream the call returns at once there too: every rank's
 * copies start once every rank's stream has reached the call (no rank's
 * receive buffer is written before its stream says so), and each stream's
 * later work runs once its rank has received everything and its send buffer
 * is no longer read. Up to 4 calls per communicator may be in flight; a
 * fifth waits on the host, as every rank does, for the oldest. A call costs
 * two exchanges of messages between the ranks; without a stream it returns
 * when this rank's data is in place (docs/multiprocess.md). */
conccl_status conccl_all_gather(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                conccl_comm_t comm, void* stream);
conccl_status conccl_all_to_all(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                conccl_comm_t comm, void* stream);
conccl_status conccl_broadcast(const conccl_buffer* root_send, const conccl_buffer* recv, size_t bytes, int root,
                               conccl_comm_t comm, void* stream);
/* Gather and scatter, as RCCL's ncclGather / ncclScatter (bytes per rank):
 *   conccl_gather   the root's recv gets every rank r's send at r x bytes;
 *                   no other rank's recv is written.
 *   conccl_scatter  every rank r's recv gets the root's send at r x bytes.
 * The root's buffer (gather's recv, scatter's send) holds nranks x bytes.
 * One process per rank: this rank's buffers alone; off the root, the root's
 * buffer may be NULL (or given: with windows it says where the root's sits).
 * Every rank in one process: one buffer per rank for the other side, and the
 * root's buffer alone (root_recv / root_send point at it). Streams and
 * ordering as conccl_all_gather. */
conccl_status conccl_gather(const conccl_buffer* send, const conccl_buffer* root_recv, size_t bytes, int root,
                            conccl_comm_t comm, void* stream);
conccl_status conccl_scatter(const conccl_buffer* root_send, const conccl_buffer* recv, size_t bytes, int root,
                             conccl_comm_t comm, void* stream);

/* ---- reductions: NCCL-shaped, counts in elements ---------------------------
 * ncclReduceScatter, ncclAllReduce and ncclReduce, in their argument order,
 * with conccl_buffer pointers (docs/reductions.md). The copy engines move the
 * data into a staging buffer per rank (64 MiB, allocated on the first
 * reduction and kept; larger calls run in pieces through it), and one reduce
 * step per rank and piece adds it up (nv: a kernel on the GPU; emu: the
 * host). Counts are elements of `dt`, as NCCL's:
 *   conccl_reduce_scatter  send[r]: nranks x recvcount elements; recv[r]:
 *                          recvcount, the reduction over ranks q of
 *                          send[q][r x recvcount, (r+1) x recvcount)
 *   conccl_all_reduce      send[r]: count; recv[r]: count, the reduction over
 *                          ranks q of send[q]
 *   conccl_reduce          send[r]: count; recv[root]: count (no other rank's
 *                          recv is written)
 * In place, as NCCL allows: reduce_scatter with recv[r] the sub-range of
 * send[r] at r x recvcount elements; all_reduce with recv[r] == send[r];
 * reduce with recv == send on the root.
 * The result is exact and the same on every backend and algorithm: inputs
 * are reduced in rank order, rank 0 first, left to right.
 *  - Integers: wrap on overflow (two's complement); AVG is the wrapped sum
 *    divided by nranks, truncated toward zero.
 *  - FLOAT32: each step rounded to float32; AVG divides the sum by nranks.
 *  - BFLOAT16 and FLOAT16: every input widened to float32 and accumulated in
 *    float32 in rank order (AVG divided in float32), then rounded once to the
 *    element type (to nearest even).
 *  - MIN/MAX of floats: a NaN input makes the result NaN; of equal values the
 *    lower rank's is kept (max(+0, -0) over ranks 0, 1 is +0).
 * dt and op take the values NCCL gives ncclDataType_t and ncclRedOp_t;
 * NCCL's int8, uint32, uint64 and float64 have no reduction here (another
 * value is CONCCL_ERR_INVALID_ARGUMENT naming the valid ones). Unlike NCCL,
 * a count of 0 is refused: skip the call instead.
 * Buffers and ranks as the NCCL-shaped calls above. Every rank in one
 * process: send and recv are arrays of one buffer per rank (reduce: recv[r]
 * of a rank other than root may be a struct of zeros). One process per rank
 * (conccl_comm_create_rank): this rank's buffers alone, every rank making the
 * same calls in the same order; recv may be NULL on ranks other than the
 * root of reduce.
 * stream NULL: the call returns when the results are in place and the send
 * buffers are no longer read. stream a CUstream (backend "nv"; (void*)1 for
 * the legacy default stream): the moves and the reduce kernels are ordered
 * on it and the call returns at once; the stream's later work sees the
 * results. On nv the reduce kernel writes recv, so recv must be CUDA memory
 * (conccl_buffer_alloc_cuda, conccl_buffer_register_cuda): memory of
 * conccl_buffer_alloc is refused. Other backends refuse a stream
 * (CONCCL_ERR_UNAVAILABLE). */
typedef enum conccl_datatype {
  CONCCL_UINT8 = 1,
  CONCCL_INT32 = 2,
  CONCCL_INT64 = 4,
  CONCCL_FLOAT16 = 6,
  CONCCL_FLOAT32 = 7,
  CONCCL_BFLOAT16 = 9
} conccl_datatype;
typedef enum conccl_redop {
  CONCCL_SUM = 0,
  CONCCL_PROD = 1,
  CONCCL_MAX = 2,
  CONCCL_MIN = 3,
  CONCCL_AVG = 4
} conccl_redop;
/* "uint8", "int32", "int64", "half", "float", "bfloat16" and "sum", "prod",
 * "max", "min", "avg" (nccl-tests' names); "?" for a number that is none. */
const char* conccl_datatype_name(conccl_datatype dt);
const char* conccl_redop_name(conccl_redop op);
conccl_status conccl_reduce_scatter(const conccl_buffer* send, const conccl_buffer* recv, size_t recvcount,
                                    conccl_datatype dt, conccl_redop op, conccl_comm_t comm, void* stream);
conccl_status conccl_all_reduce(const conccl_buffer* send, const conccl_buffer* recv, size_t count,
                                conccl_datatype dt, conccl_redop op, conccl_comm_t comm, void* stream);
conccl_status conccl_reduce(const conccl_buffer* send, const conccl_buffer* recv, size_t count, conccl_datatype dt,
                            conccl_redop op, int root, conccl_comm_t comm, void* stream);

/* ---- symmetric heaps: one window per rank, carved at the same offsets -----
 * (src/c_api/heap.cpp; docs/multiprocess.md, "PyTorch memory pool")
 * A heap is one buffer per rank, registered once as a window, out of which
 * allocations are carved by a deterministic allocator: first fit over
 * offsets, every offset and size a multiple of 512 bytes. The same sequence
 * of allocations and frees on every rank gives the same offsets on every
 * rank (as NVSHMEM's and torch's SymmetricMemory heaps do), so buffers of
 * the heap go into the NCCL-shaped calls above with no message between the
 * ranks (conccl_heap_buffer gives their conccl_buffer).
 * One process per rank only (conccl_comm_create_rank). Backend "nv": CUDA VMM
 * memory (as conccl_buffer_alloc_cuda) on this rank's GPU, and pointers are
 * CUDA pointers that kernels and PyTorch use; other backends ("emu"): device
 * memory (conccl_buffer_alloc), and pointers are engine addresses (va).
 * A heap lives until conccl_heap_destroy. Destroying its communicator (or
 * closing its device) makes every call on it fail, saying so, except
 * conccl_heap_destroy, which then releases its memory without a collective
 * step (closing the device releases it too). */
typedef struct conccl_heap* conccl_heap_t;
/* Collective: every rank, in the same order as its other window calls, with
 * the same bytes (a mismatch is CONCCL_ERR_INVALID_ARGUMENT on every rank,
 * naming both sizes). bytes is rounded up to a multiple of 512. */
conccl_status conccl_heap_create(conccl_comm_t comm, size_t bytes, conccl_heap_t* heap);
/* Collective while its communicator lives (the window is deregistered, after
 * the calls that use it); then frees the memory. Allocations still in use
 * (tensors of a torch.cuda.MemPool on it, say) must be dead by then. */
conccl_status conccl_heap_destroy(conccl_heap_t heap);
/* bytes (0 counts as 1) rounded up to 512, first fit: *ptr is the pointer of
 * the allocation. Out of heap: CONCCL_ERR_RESOURCE_EXHAUSTED saying what is
 * free. Same sequence on every rank -> same offsets. */
conccl_status conccl_heap_alloc(conccl_heap_t heap, size_t bytes, uint64_t* ptr);
/* ptr: what conccl_heap_alloc (or conccl_heap_torch_alloc) returned. */
conccl_status conccl_heap_free(conccl_heap_t heap, uint64_t ptr);
/* The conccl_buffer of heap bytes [ptr, ptr + bytes) (a sub-range of the
 * heap's registered buffer, so that the NCCL-shaped calls find its window).
 * A pointer outside the heap is CONCCL_ERR_INVALID_ARGUMENT; a range that
 * runs past its end CONCCL_ERR_OUT_OF_RANGE. The struct is not freeable
 * (conccl_buffer_free refuses it): free through the heap. */
conccl_status conccl_heap_buffer(conccl_heap_t heap, uint64_t ptr, size_t bytes, conccl_buffer* buffer);
typedef struct conccl_heap_info {
  uint64_t base;         /* the pointer of offset 0 (CUDA pointer on nv, va elsewhere) */
  size_t bytes;          /* usable bytes (a multiple of 512) */
  size_t used;           /* bytes allocated now (sizes rounded up to 512) */
  size_t largest_free;   /* the largest free range */
  size_t allocations;    /* live allocations */
  int cuda_device;       /* nv: the CUDA device ordinal of the memory; -1 elsewhere */
  conccl_buffer buffer;  /* the whole heap, [base, base + bytes), as conccl_heap_buffer gives it */
} conccl_heap_info;
conccl_status conccl_heap_get_info(conccl_heap_t heap, conccl_heap_info* info);

/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator(
 * path of libconccl.so, "conccl_heap_torch_alloc", "conccl_heap_torch_free"),
 * wrapped in a torch.cuda.MemPool). Its functions take no user argument, so
 * they work on the heap made current by conccl_heap_make_current (one per
 * process at a time; NULL makes none current). torch_alloc carves from the
 * current heap (device must be the heap's CUDA device on nv; stream is not
 * used: PyTorch's caching allocator above it orders reuse on streams);
 * torch_free releases ptr in whichever live heap holds it (size must be the
 * size allocated). Neither ever aborts or throws: on an error (out of heap,
 * no current heap, a foreign pointer) alloc returns NULL, which PyTorch
 * raises as out of memory, free does nothing, and both record the message
 * for conccl_heap_torch_error (and conccl_last_error on that thread). */
conccl_status conccl_heap_make_current(conccl_heap_t heap);
void* conccl_heap_torch_alloc(size_t size, int device, void* stream);
void conccl_heap_torch_free(void* ptr, size_t size, int device, void* stream);
/* The message of the latest failed conccl_heap_torch_alloc/free of this
 * process (any thread; "" if none failed), written as
 * conccl_device_topology_json writes. */
conccl_status conccl_heap_torch_error(char* buf, size_t capacity, size_t* needed);

/* ---- across nodes: ConCCL inside each node, your engine between nodes ------
 * (conccl/hierarchy.hpp has the algorithms; docs/multinode.md.)
 * Ranks are numbered node-major, as torchrun numbers them: global rank =
 * node x L + local rank, L ranks on every node, one process per rank. `local`
 * is this rank's communicator over its node's L ranks
 * (conccl_comm_create_rank); `inter` is your engine between the nodes (an
 * NCCL, RCCL or UCX communicator, say) over this rank and the ranks with the
 * same local rank on the other nodes, in node order. Each callback is
 * collective over that group and returns CONCCL_OK or an error status
 * (another value is reported as the engine's failure). Buffers are this
 * rank's, on local's device: `va` is the address your engine uses (on nv
 * the CUDA pointer), `host` the CPU's mapping where there is one (the
 * emulator), `size` their bytes; `id` names a buffer of yours (a sub-range
 * of it) or is 0 for ConCCL's own scratch. `stream` is the stream the
 * conccl_hier_* call got (NULL: return when the data is in place).
 * The inter-node engine only moves bytes: reductions across nodes are
 * ConCCL's reduce step over the nodes' partial results, in node order. */
typedef struct conccl_hier* conccl_hier_t;
typedef struct conccl_internode {
  size_t struct_size; /* sizeof(conccl_internode) */
  void* user;         /* passed back to every callback */
  /* recv: nnodes x bytes, node j's send at j x bytes. send may be
   * recv + node x bytes (in place). */
  conccl_status (*all_gather)(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                              void* stream);
  /* send and recv: nnodes slots of bytes; send's slot j goes to node j, recv's
   * slot j comes from node j. Never in place. */
  conccl_status (*all_to_all)(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                              void* stream);
  /* recv on every node gets the root node's send (read on the root alone;
   * it may be recv there). */
  conccl_status (*broadcast)(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                             int root_node, void* stream);
} conccl_internode;
/* `node` of `nnodes`. The callbacks are copied; `user` must stay valid
 * until conccl_hier_destroy, which is collective over the node (every rank
 * of it: its scratch windows leave `local`). Destroying `local` (or closing
 * its device) first destroys the hierarchical communicator's state: its
 * calls then fail, saying so; conccl_hier_destroy still releases the
 * handle. */
conccl_status conccl_hier_create(conccl_comm_t local, int node, int nnodes, const conccl_internode* inter,
                                 conccl_hier_t* hier);
conccl_status conccl_hier_destroy(conccl_hier_t hier);
/* This rank's global rank and the global rank count (-1 and 0 on error). */
int conccl_hier_rank(conccl_hier_t hier);
int conccl_hier_size(conccl_hier_t hier);
/* NCCL's shapes and argument order over all nnodes x L ranks, this rank's
 * buffers: all_gather recv holds size x bytes; all_to_all send and recv
 * size x bytes; broadcast's root is a global rank (send read there, may be
 * NULL elsewhere); reduce_scatter send holds size x recvcount elements. */
conccl_status conccl_hier_all_gather(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                     conccl_hier_t hier, void* stream);
conccl_status conccl_hier_all_to_all(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                     conccl_hier_t hier, void* stream);
conccl_status conccl_hier_broadcast(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                                    conccl_hier_t hier, void* stream);
conccl_status conccl_hier_reduce_scatter(const conccl_buffer* send, const conccl_buffer* recv, size_t recvcount,
                                         conccl_datatype dt, conccl_redop op, conccl_hier_t hier, void* stream);
conccl_status conccl_hier_all_reduce(const conccl_buffer* send, const conccl_buffer* recv, size_t count,
                                     conccl_datatype dt, conccl_redop op, conccl_hier_t hier, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* CONCCL_CONCCL_H */
