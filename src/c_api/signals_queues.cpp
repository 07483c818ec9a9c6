// src/c_api/signals_queues.cpp - conccl_signal_* and conccl_queue_*: completion
// signals and one engine queue with its pending command buffer.
#include "conccl/conccl.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/c_objects.hpp"

using namespace conccl;
using namespace conccl::capi;

extern "C" {

// ---- signals -------------------------------------------------------------------

conccl_status conccl_signal_create(conccl_device_t dh, uint64_t initial, conccl_signal_t* s) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(s, "signal is NULL");
    *s = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Signal> r = Signal::create(*d.dev, -1, initial);
    if (!r.ok()) return report(r.status());
    auto h = std::make_shared<conccl_signal>();
    h->device = *d_ref;
    h->sig = std::move(r).value();
    *s = handle_of<conccl_signal_t>(SignalTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_signal_destroy(conccl_signal_t s) {
  return destroy_handle<SignalTable>(__func__, s, "signal", [](conccl_signal& sig) {
    sig.sig = Signal();
    return Status();
  });
}

uint64_t conccl_signal_value(conccl_signal_t s) {
  return read_handle<SignalTable>(__func__, s, "signal", uint64_t{0},
                                  [](const conccl_signal& sig) { return sig.sig.value(); });
}

conccl_status conccl_signal_add(conccl_signal_t s, uint64_t delta) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(SignalTable, sig, s, "signal");
    (void)sig.sig.add(delta);
    return report(Status());
  });
}

uint64_t conccl_signal_address(conccl_signal_t s) {
  return read_handle<SignalTable>(__func__, s, "signal", uint64_t{0},
                                  [](const conccl_signal& sig) { return sig.sig.va(); });
}

conccl_status conccl_signal_wait(conccl_signal_t s, uint64_t v, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(SignalTable, sig, s, "signal");
    return report(sig.sig.wait(v, after(timeout_ms)));
  });
}

// ---- queues --------------------------------------------------------------------

void conccl_queue_options_init(conccl_queue_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

conccl_status conccl_queue_create(conccl_device_t dh, int gpu, int engine, const conccl_queue_options* o,
                                  conccl_queue_t* q) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(q, "queue is NULL");
    *q = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    QueueOptions opt;
    if (o) {
      CONCCL_C_REQUIRE(size_ok(o, sizeof(conccl_queue_options)),
                       "options->struct_size is " + std::to_string(o->struct_size) +
                           ": call conccl_queue_options_init first");
      if (o->ring_bytes) opt.ring_bytes = o->ring_bytes;
    }
    Result<std::unique_ptr<Queue>> r = d.dev->create_queue(gpu, engine, opt);
    if (!r.ok()) return report(r.status());
    auto h = std::make_shared<conccl_queue>(conccl_queue{*d_ref, std::move(r).value(), CommandBuffer(Isa{})});
    h->pending = h->q->command_buffer();
    *q = handle_of<conccl_queue_t>(QueueTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_queue_destroy(conccl_queue_t q) {
  return destroy_handle<QueueTable>(__func__, q, "queue", [](conccl_queue& x) {
    x.pending.clear();
    x.q.reset();
    return Status();
  });
}

conccl_status conccl_queue_copy(conccl_queue_t qh, uint64_t dst, uint64_t src, uint64_t bytes) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    return report(q.pending.copy(dst, src, bytes));
  });
}

conccl_status conccl_queue_fill(conccl_queue_t qh, uint64_t dst, uint32_t value, uint64_t bytes) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    return report(q.pending.fill(dst, value, bytes));
  });
}

conccl_status conccl_queue_signal_add(conccl_queue_t qh, conccl_signal_t sh, uint64_t delta) {
  return signal_command(__func__, qh, sh, [&](CommandBuffer& cb, Signal& sig) { return sig.signal_add(cb, delta); });
}

conccl_status conccl_queue_wait_ge(conccl_queue_t qh, conccl_signal_t sh, uint64_t v) {
  return signal_command(__func__, qh, sh, [&](CommandBuffer& cb, Signal& sig) { return sig.wait_ge(cb, v); });
}

conccl_status conccl_queue_wait_signal(conccl_queue_t qh, conccl_signal_t sh, uint64_t v) {
  return conccl_queue_wait_ge(qh, sh, v);
}

conccl_status conccl_queue_submit(conccl_queue_t qh, uint32_t timeout_ms, uint64_t* ticket) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    QueueSpan span;
    Status st = q.q->submit(q.pending, after(timeout_ms), &span);
    if (st.ok()) {
      q.pending.clear();
      if (ticket) *ticket = span.end;
    }
    return report(st);
  });
}

conccl_status conccl_queue_wait(conccl_queue_t qh, uint64_t ticket, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    return report(q.q->wait_done(after(timeout_ms), ticket));
  });
}

uint64_t conccl_queue_completed(conccl_queue_t qh) {
  return read_handle<QueueTable>(__func__, qh, "queue", uint64_t{0},
                                 [](const conccl_queue& q) { return q.q->completed(); });
}

size_t conccl_queue_pending_bytes(conccl_queue_t qh) {
  return read_handle<QueueTable>(__func__, qh, "queue", size_t{0},
                                 [](const conccl_queue& q) { return q.pending.size_bytes(); });
}

}  // extern "C"
