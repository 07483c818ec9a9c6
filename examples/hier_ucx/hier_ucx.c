/* examples/hier_ucx/hier_ucx.c - collectives across nodes: ConCCL's DMA
 * engines inside each node, UCX between the nodes (docs/multinode.md).
 *
 *   hier_ucx [nodes] [ranks_per_node]      (default 2 2; emulated node, no GPU)
 *
 * One machine plays `nodes` nodes: the program forks nodes x ranks_per_node
 * processes, numbered node-major (rank = node x L + local rank). Each opens
 * the emulated device with its own process slot and joins its node's
 * ConCCL communicator (conccl_comm_create_rank, one unique id per node).
 * Between the nodes each rank talks UCX (tag matching over TCP on the
 * loopback interface: UCX_TLS=tcp, UCX_NET_DEVICES=lo unless set) to the
 * ranks of its local rank on the other nodes; those UCX moves are the
 * callbacks of a conccl_internode, which conccl_hier_* calls between its
 * local steps. Every output byte is checked; rank 0 prints a table.
 *
 * On real nodes, replace the fork and the address files with your launcher
 * and its exchange, and the emulated device with "nv" (CUDA pointers in
 * va; UCX with CUDA support moves them).
 */
#define _GNU_SOURCE
#include <conccl/conccl.h>
#include <ucp/api/ucp.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kMaxNodes = 8, kWaitSeconds = 60 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- UCX between the nodes: this rank and the ranks of its local rank ---- */
typedef struct engine {
  int node, nodes;
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_ep_h ep[kMaxNodes]; /* by node; NULL for this node */
  uint64_t seq;           /* calls so far: part of every tag */
} engine;

/* Waits for a request, progressing the worker, at most kWaitSeconds. */
static ucs_status_t finish(engine* e, ucs_status_ptr_t req) {
  if (req == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  const double end = now_s() + kWaitSeconds;
  ucs_status_t st;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
    ucp_worker_progress(e->worker);
    if (now_s() > end) {
      st = UCS_ERR_TIMED_OUT;
      break;
    }
  }
  ucp_request_free(req);
  return st;
}

/* Moves for one call: to[j] (bytes) goes to node j, from[j] comes from node
 * j (NULL: nothing). Tags: call number and sending node. */
static conccl_status exchange(engine* e, const uint8_t* const* to, uint8_t* const* from, size_t bytes) {
  ucs_status_ptr_t reqs[2 * kMaxNodes];
  int n = 0;
  const uint64_t call = ++e->seq;
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  for (int j = 0; j < e->nodes; ++j)
    if (j != e->node && from[j])
      reqs[n++] = ucp_tag_recv_nbx(e->worker, from[j], bytes, call << 8 | (uint64_t)j, ~(ucp_tag_t)0, &p);
  for (int j = 0; j < e->nodes; ++j)
    if (j != e->node && to[j]) reqs[n++] = ucp_tag_send_nbx(e->ep[j], to[j], bytes, call << 8 | (uint64_t)e->node, &p);
  conccl_status s = CONCCL_OK;
  for (int i = 0; i < n; ++i) {
    ucs_status_t st = finish(e, reqs[i]);
    if (st != UCS_OK) {
      fprintf(stderr, "node %d: UCX: %s\n", e->node, ucs_status_string(st));
      s = st == UCS_ERR_TIMED_OUT ? CONCCL_ERR_TIMEOUT : CONCCL_ERR_UNAVAILABLE;
    }
  }
  return s;
}

/* The conccl_internode callbacks. The emulator's memory is the CPU's
 * (host); with CUDA memory UCX takes va. */
static uint8_t* mem_of(const conccl_buffer* b) { return b->host ? (uint8_t*)b->host : (uint8_t*)(uintptr_t)b->va; }

static conccl_status ucx_all_gather(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                    void* stream) {
  engine* e = user;
  (void)stream; /* host-ordered: the calls get stream NULL */
  uint8_t* r = mem_of(recv);
  const uint8_t* mine = r + (size_t)e->node * bytes;
  if (mem_of(send) != mine) memmove(r + (size_t)e->node * bytes, mem_of(send), bytes);
  const uint8_t* to[kMaxNodes];
  uint8_t* from[kMaxNodes];
  for (int j = 0; j < e->nodes; ++j) {
    to[j] = mine;
    from[j] = r + (size_t)j * bytes;
  }
  return exchange(e, to, from, bytes);
}

static conccl_status ucx_all_to_all(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                    void* stream) {
  engine* e = user;
  (void)stream;
  const uint8_t* s = mem_of(send);
  uint8_t* r = mem_of(recv);
  memcpy(r + (size_t)e->node * bytes, s + (size_t)e->node * bytes, bytes);
  const uint8_t* to[kMaxNodes];
  uint8_t* from[kMaxNodes];
  for (int j = 0; j < e->nodes; ++j) {
    to[j] = s + (size_t)j * bytes;
    from[j] = r + (size_t)j * bytes;
  }
  return exchange(e, to, from, bytes);
}

static conccl_status ucx_broadcast(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                   int root, void* stream) {
  engine* e = user;
  (void)stream;
  const uint8_t* to[kMaxNodes] = {0};
  uint8_t* from[kMaxNodes] = {0};
  if (e->node == root) {
    if (mem_of(send) != mem_of(recv)) memcpy(mem_of(recv), mem_of(send), bytes);
    for (int j = 0; j < e->nodes; ++j) to[j] = mem_of(recv);
  } else {
    from[root] = mem_of(recv);
  }
  return exchange(e, to, from, bytes);
}

/* Worker addresses through files in `dir` (a launcher's exchange would do). */
static int engine_open(engine* e, const char* dir, int rank, int node, int nodes, int local, int L) {
  memset(e, 0, sizeof *e);
  e->node = node;
  e->nodes = nodes;
  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_config_t* config;
  if (ucp_config_read(NULL, NULL, &config) != UCS_OK) return -1;
  ucs_status_t st = ucp_init(&params, config, &e->ctx);
  ucp_config_release(config);
  if (st != UCS_OK) return fprintf(stderr, "ucp_init: %s\n", ucs_status_string(st)), -1;
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((st = ucp_worker_create(e->ctx, &wp, &e->worker)) != UCS_OK)
    return fprintf(stderr, "ucp_worker_create: %s\n", ucs_status_string(st)), -1;
  ucp_address_t* addr;
  size_t len;
  if (ucp_worker_get_address(e->worker, &addr, &len) != UCS_OK) return -1;
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/addr.%d", dir, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  if (!f || fwrite(addr, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) return -1;
  ucp_worker_release_address(e->worker, addr);
  for (int j = 0; j < nodes; ++j) {
    if (j == node) continue;
    snprintf(path, sizeof path, "%s/addr.%d", dir, j * L + local);
    const double end = now_s() + kWaitSeconds;
    struct stat sb;
    while (stat(path, &sb) != 0) {
      if (now_s() > end) return fprintf(stderr, "rank %d: no UCX address from node %d\n", rank, j), -1;
      usleep(1000);
    }
    void* peer = malloc((size_t)sb.st_size);
    f = fopen(path, "rb");
    if (!peer || !f || fread(peer, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) return -1;
    fclose(f);
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = peer;
    st = ucp_ep_create(e->worker, &ep, &e->ep[j]);
    free(peer);
    if (st != UCS_OK) return fprintf(stderr, "ucp_ep_create: %s\n", ucs_status_string(st)), -1;
  }
  return 0;
}

static void engine_close(engine* e) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE; /* after the final barrier nothing is in flight */
  for (int j = 0; j < e->nodes; ++j)
    if (e->ep[j]) (void)finish(e, ucp_ep_close_nbx(e->ep[j], &p));
  if (e->worker) ucp_worker_destroy(e->worker);
  if (e->ctx) ucp_cleanup(e->ctx);
}

/* ---- one rank ---- */
#define CHECK(call)                                                                                        \
  do {                                                                                                     \
    conccl_status s_ = (call);                                                                             \
    if (s_ != CONCCL_OK) {                                                                                 \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, conccl_status_name(s_), conccl_last_error()); \
      return 1;                                                                                            \
    }                                                                                                      \
  } while (0)

static uint32_t value(int rank, size_t i) { return (uint32_t)(rank * 2654435761u + i * 40503u + 1u); }

static conccl_buffer part(const conccl_buffer* b, size_t offset, size_t bytes) {
  conccl_buffer s = *b;
  s.va += offset;
  s.host = (uint8_t*)b->host + offset;
  s.size = bytes;
  return s;
}

static int rank_main(int rank, int nodes, int L, const conccl_unique_id* ids, const char* dir) {
  const int node = rank / L, local = rank % L, n = nodes * L;
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.backend = "emu";
  o.settings = "preset=mi300x memory_per_gpu=256M";
  o.process_slot = rank;
  conccl_device_t dev;
  CHECK(conccl_device_open(&o, &dev));
  int gpus = 0;
  CHECK(conccl_device_gpu_count(dev, &gpus));
  conccl_comm_t comm;
  CHECK(conccl_comm_create_rank(dev, local, L, &ids[node], rank % gpus, NULL, &comm));

  engine e;
  if (engine_open(&e, dir, rank, node, nodes, local, L) != 0) return fprintf(stderr, "rank %d: UCX setup\n", rank), 1;
  conccl_internode table;
  memset(&table, 0, sizeof table);
  table.struct_size = sizeof table;
  table.user = &e;
  table.all_gather = ucx_all_gather;
  table.all_to_all = ucx_all_to_all;
  table.broadcast = ucx_broadcast;
  conccl_hier_t hier;
  CHECK(conccl_hier_create(comm, node, nodes, &table, &hier));

  /* One buffer, registered as a window of the node's communicator, so the
   * local steps need no message between the node's ranks: send at 0, recv
   * at half. */
  const size_t count = 1u << 14; /* elements per rank */
  const size_t half = (size_t)n * count * 4;
  conccl_buffer mem;
  CHECK(conccl_buffer_alloc(dev, rank % gpus, 2 * half, CONCCL_MEM_DEVICE, &mem));
  conccl_window_t win;
  CHECK(conccl_comm_window_register(comm, &mem, &win));
  conccl_buffer send = part(&mem, 0, half), recv = part(&mem, half, half);
  uint32_t* s = send.host;
  uint32_t* r = recv.host;
  long wrong = 0;
  double t0, us[5];

  /* all_gather: count uint32 per rank */
  for (size_t i = 0; i < count; ++i) s[i] = value(rank, i);
  t0 = now_s();
  CHECK(conccl_hier_all_gather(&send, &recv, count * 4, hier, NULL));
  us[0] = (now_s() - t0) * 1e6;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) wrong += r[(size_t)q * count + i] != value(q, i);

  /* all_reduce: float32 SUM of small integers (exact in any order) */
  float* fs = send.host;
  float* fr = recv.host;
  for (size_t i = 0; i < count; ++i) fs[i] = (float)(value(rank, i) % 1000u);
  t0 = now_s();
  CHECK(conccl_hier_all_reduce(&send, &recv, count, CONCCL_FLOAT32, CONCCL_SUM, hier, NULL));
  us[1] = (now_s() - t0) * 1e6;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += (float)(value(q, i) % 1000u);
    wrong += fr[i] != want;
  }

  /* reduce_scatter: int32 SUM (wraps alike in any order) */
  for (size_t i = 0; i < (size_t)n * count; ++i) s[i] = value(rank, i);
  t0 = now_s();
  CHECK(conccl_hier_reduce_scatter(&send, &recv, count, CONCCL_INT32, CONCCL_SUM, hier, NULL));
  us[2] = (now_s() - t0) * 1e6;
  for (size_t i = 0; i < count; ++i) {
    uint32_t want = 0;
    for (int q = 0; q < n; ++q) want += value(q, (size_t)rank * count + i);
    wrong += r[i] != want;
  }

  /* all_to_all: count / n uint32 per pair */
  const size_t c = count / (size_t)n;
  for (size_t i = 0; i < (size_t)n * c; ++i) s[i] = value(rank, i);
  t0 = now_s();
  CHECK(conccl_hier_all_to_all(&send, &recv, c * 4, hier, NULL));
  us[3] = (now_s() - t0) * 1e6;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < c; ++i) wrong += r[(size_t)q * c + i] != value(q, (size_t)rank * c + i);

  /* broadcast from the last rank */
  const int root = n - 1;
  for (size_t i = 0; i < count; ++i) s[i] = value(root, i) ^ (uint32_t)rank * (rank != root);
  t0 = now_s();
  CHECK(conccl_hier_broadcast(&send, &recv, count * 4, root, hier, NULL));
  us[4] = (now_s() - t0) * 1e6;
  for (size_t i = 0; i < count; ++i) wrong += r[i] != value(root, i);

  /* A last all-reduce as a barrier, so that no rank closes its UCX
   * endpoints while a peer still waits on them. */
  CHECK(conccl_hier_all_reduce(&send, &recv, (size_t)n, CONCCL_INT32, CONCCL_SUM, hier, NULL));
  if (rank == 0) {
    const char* ops[5] = {"all_gather", "all_reduce", "reduce_scatter", "all_to_all", "broadcast"};
    const size_t bytes[5] = {count * 4, count * 4, count * 4, c * 4, count * 4};
    printf("%d nodes x %d ranks: ConCCL inside each node (emulated), UCX between them\n", nodes, L);
    printf("%-15s %12s %12s\n", "op", "bytes/rank", "time (us)");
    for (int i = 0; i < 5; ++i) printf("%-15s %12zu %12.0f\n", ops[i], bytes[i], us[i]);
  }
  engine_close(&e);
  CHECK(conccl_hier_destroy(hier));
  CHECK(conccl_comm_window_deregister(comm, win));
  CHECK(conccl_comm_destroy(comm));
  CHECK(conccl_buffer_free(dev, &mem));
  CHECK(conccl_device_close(dev));
  if (wrong) fprintf(stderr, "rank %d: %ld wrong elements\n", rank, wrong);
  return wrong ? 2 : 0;
}

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? atoi(argv[1]) : 2, L = argc > 2 ? atoi(argv[2]) : 2;
  if (nodes < 1 || nodes > kMaxNodes || L < 1 || nodes * L > 16) {
    fprintf(stderr, "usage: hier_ucx [nodes 1..%d] [ranks_per_node], at most 16 ranks\n", kMaxNodes);
    return 2;
  }
  setenv("UCX_TLS", "tcp", 0);        /* TCP ... */
  setenv("UCX_NET_DEVICES", "lo", 0); /* ... on the loopback interface */
  conccl_unique_id ids[kMaxNodes];
  for (int j = 0; j < nodes; ++j)
    if (conccl_get_unique_id(&ids[j]) != CONCCL_OK) return fprintf(stderr, "%s\n", conccl_last_error()), 1;
  char dir[] = "/tmp/hier_ucx.XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  pid_t pids[16];
  for (int r = 0; r < nodes * L; ++r) {
    fflush(stdout);
    pids[r] = fork();
    if (pids[r] == 0) {
      const int code = rank_main(r, nodes, L, ids, dir);
      fflush(stdout); /* _exit does not flush stdio */
      fflush(stderr);
      _exit(code);
    }
  }
  int failed = 0;
  for (int r = 0; r < nodes * L; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (status %d)\n", r, st);
      failed = 1;
    }
  }
  for (int r = 0; r < nodes * L; ++r) {
    char path[512];
    snprintf(path, sizeof path, "%s/addr.%d", dir, r);
    unlink(path);
  }
  rmdir(dir);
  printf("hier_ucx: %s\n", failed ? "FAILED" : "every byte of every rank checked: OK");
  return failed;
}
