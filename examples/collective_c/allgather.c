/* examples/collective_c/allgather.c - a collective backend in C: a
 * communicator over every GPU of the device, an all-gather through the
 * NCCL-shaped call, then the same all-gather as a plan whose per-rank
 * completion (address, value) a compute stream could wait on.
 *
 *   allgather [backend] [settings]   (default: emu, its mi300x preset - no GPU needed)
 *   allgather emu "preset=small"     (the backend's settings, docs/backends.md)
 */
#include <conccl/conccl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                             \
  do {                                                                                          \
    conccl_status s_ = (call);                                                                  \
    if (s_ != CONCCL_OK) {                                                                      \
      fprintf(stderr, "%s failed: %s: %s\n", #call, conccl_status_name(s_), conccl_last_error()); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

enum { kMaxRanks = 16 };

int main(int argc, char** argv) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.backend = argc > 1 ? argv[1] : "emu";
  o.settings = argc > 2 ? argv[2] : NULL;
  conccl_device_t dev;
  CHECK(conccl_device_open(&o, &dev));
  int n = 0;
  CHECK(conccl_device_gpu_count(dev, &n));
  if (n > kMaxRanks) n = kMaxRanks;
  int gpus[kMaxRanks];
  for (int r = 0; r < n; ++r) gpus[r] = r;
  conccl_comm_t comm;
  CHECK(conccl_comm_create(dev, gpus, n, NULL, &comm));

  const size_t chunk = 1u << 20;
  conccl_buffer send[kMaxRanks], recv[kMaxRanks];
  uint8_t* data = malloc(chunk * n);
  uint64_t x = 12345;
  for (size_t i = 0; i < chunk * n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = (uint8_t)(x >> 56);
  }
  for (int r = 0; r < n; ++r) {
    CHECK(conccl_buffer_alloc(dev, r, chunk, CONCCL_MEM_DEVICE, &send[r]));
    CHECK(conccl_buffer_alloc(dev, r, chunk * n, CONCCL_MEM_DEVICE, &recv[r]));
    CHECK(conccl_buffer_upload(dev, &send[r], 0, data + chunk * r, chunk, 10000));
  }

  /* 1. NCCL-shaped: returns when every rank has every chunk. */
  CHECK(conccl_all_gather(send, recv, chunk, comm, NULL));

  /* 2. The same as a plan: launch, then wait the way a stream would. */
  conccl_collective_args a;
  conccl_collective_args_init(&a);
  a.op = CONCCL_ALL_GATHER;
  a.bytes = chunk;
  a.send = send;
  a.nsend = n;
  a.recv = recv;
  a.nrecv = n;
  conccl_plan_t plan;
  CHECK(conccl_plan_create(comm, &a, &plan));
  CHECK(conccl_plan_launch(plan, 10000));
  uint64_t addr = 0, value = 0;
  CHECK(conccl_plan_completion(plan, 0, &addr, &value));
  CHECK(conccl_plan_wait(plan, 10000));

  uint8_t* back = malloc(chunk * n);
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    CHECK(conccl_buffer_download(dev, back, &recv[r], 0, chunk * n, 10000));
    for (size_t i = 0; i < chunk * n; ++i) wrong += back[i] != data[i];
  }
  printf("allgather: %d ranks x %zu bytes, variant %s, rank 0 complete when *0x%llx >= %llu, %zu wrong bytes\n", n,
         chunk, conccl_variant_name(conccl_plan_variant(plan)), (unsigned long long)addr, (unsigned long long)value,
         wrong);

  conccl_plan_destroy(plan);
  for (int r = 0; r < n; ++r) {
    CHECK(conccl_buffer_free(dev, &send[r]));
    CHECK(conccl_buffer_free(dev, &recv[r]));
  }
  conccl_comm_destroy(comm);
  conccl_device_close(dev);
  free(data);
  free(back);
  return wrong == 0 ? 0 : 1;
}
