/* examples/transport_c/transport.c - a custom transport in C on ConCCL's
 * queue layer: one DMA queue, a copy between two GPUs, a completion signal
 * the host waits on, every byte checked.
 *
 *   transport [backend] [settings]   (default: emu, its mi300x preset - no GPU needed)
 *   transport emu "preset=small"     (the backend's settings, docs/backends.md)
 */
#include <conccl/conccl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    conccl_status s_ = (call);                                                       \
    if (s_ != CONCCL_OK) {                                                           \
      fprintf(stderr, "%s failed: %s: %s\n", #call, conccl_status_name(s_), conccl_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

int main(int argc, char** argv) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.backend = argc > 1 ? argv[1] : "emu";
  o.settings = argc > 2 ? argv[2] : NULL;
  conccl_device_t dev;
  CHECK(conccl_device_open(&o, &dev));
  int gpus = 0;
  CHECK(conccl_device_gpu_count(dev, &gpus));
  const int dst_gpu = gpus > 1 ? 1 : 0;

  /* Random data on GPU 0, a destination on GPU 1. */
  const size_t n = 8u << 20;
  conccl_buffer src, dst;
  CHECK(conccl_buffer_alloc(dev, 0, n, CONCCL_MEM_DEVICE, &src));
  CHECK(conccl_buffer_alloc(dev, dst_gpu, n, CONCCL_MEM_DEVICE, &dst));
  uint8_t* data = malloc(n);
  uint8_t* back = malloc(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    data[i] = (uint8_t)x;
  }
  CHECK(conccl_buffer_upload(dev, &src, 0, data, n, 10000));

  /* One queue on GPU 0's first engine: copy, then add 1 to a signal. */
  int engines[64], count = 0;
  CHECK(conccl_device_engines(dev, 0, engines, 64, &count));
  conccl_queue_t q;
  CHECK(conccl_queue_create(dev, 0, engines[0], NULL, &q));
  conccl_signal_t done;
  CHECK(conccl_signal_create(dev, 0, &done));
  CHECK(conccl_queue_copy(q, dst.va, src.va, n));
  CHECK(conccl_queue_signal_add(q, done, 1));
  uint64_t ticket = 0;
  CHECK(conccl_queue_submit(q, 1000, &ticket));
  CHECK(conccl_signal_wait(done, 1, 10000));

  CHECK(conccl_buffer_download(dev, back, &dst, 0, n, 10000));
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += back[i] != data[i];
  printf("transport: %zu bytes GPU 0 -> GPU %d on engine %d, ticket %llu, signal %llu, %zu wrong bytes\n", n,
         dst_gpu, engines[0], (unsigned long long)ticket, (unsigned long long)conccl_signal_value(done), wrong);

  /* An error names the problem: a queue on an engine that does not exist. */
  conccl_queue_t bad;
  conccl_status s = conccl_queue_create(dev, 0, 999, NULL, &bad);
  printf("queue on engine 999: %s (%s)\n", conccl_status_name(s), conccl_last_error());

  conccl_signal_destroy(done);
  conccl_queue_destroy(q);
  CHECK(conccl_buffer_free(dev, &src));
  CHECK(conccl_buffer_free(dev, &dst));
  conccl_device_close(dev);
  free(data);
  free(back);
  return wrong == 0 && s != CONCCL_OK ? 0 : 1;
}
