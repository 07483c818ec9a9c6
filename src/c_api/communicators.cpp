// src/c_api/communicators.cpp - conccl_comm_*, unique ids, windows, stats and
// conccl_plan_*, and the NCCL-shaped calls' entry points (nccl_shaped.cpp).
#include "conccl/conccl.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/c_objects.hpp"
#include "conccl/bootstrap.hpp"

using namespace conccl;
using namespace conccl::capi;

extern "C" {

// ---- communicators and plans -----------------------------------------------------

const char* conccl_variant_name(conccl_variant variant) {
  const int v = enum_bits(variant);
  if (v < CONCCL_VARIANT_AUTO || v > CONCCL_VARIANT_PULL) return "?";
  return variant_name(static_cast<Variant>(v));
}

void conccl_comm_options_init(conccl_comm_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

}  // extern "C"

namespace {

// A created communicator as the caller's handle (or the error it carries).
conccl_status adopt_comm(const std::shared_ptr<conccl_device>& d, Result<std::unique_ptr<Communicator>> c,
                         uint32_t timeout, conccl_comm_t* comm) {
  if (!c.ok()) return report(c.status());
  auto h = std::make_shared<conccl_comm>();
  h->device = d;
  h->comm = std::move(c).value();
  h->timeout_ms = timeout;
  *comm = handle_of<conccl_comm_t>(CommTable::get().add(h));
  return report(Status());
}

// conccl_comm_options (NULL: the defaults) as Communicator::Options and the
// calls' timeout.
conccl_status comm_options_from(const conccl_comm_options* o, Communicator::Options* opt, uint32_t* timeout) {
  if (!o) return CONCCL_OK;
  CONCCL_C_REQUIRE(size_ok(o, sizeof(conccl_comm_options)),
                   "options->struct_size is " + std::to_string(o->struct_size) + ": call conccl_comm_options_init first");
  CONCCL_C_REQUIRE(o->num_engines >= 0 && (o->engines || o->num_engines == 0), "engines is NULL with num_engines > 0");
  if (o->ring_bytes) opt->ring_bytes = o->ring_bytes;
  opt->loopback = o->loopback != 0;
  CONCCL_C_REQUIRE(o->queues >= CONCCL_QUEUES_AUTO && o->queues <= CONCCL_QUEUES_PER_ENGINE,
                   "queues " + std::to_string(o->queues) + " is not a conccl_queue_sharing");
  opt->queues = o->queues == CONCCL_QUEUES_PER_RANK     ? Communicator::Options::QueueSharing::per_rank
                : o->queues == CONCCL_QUEUES_PER_ENGINE ? Communicator::Options::QueueSharing::per_engine
                                                        : Communicator::Options::QueueSharing::automatic;
  opt->engines.assign(o->engines, o->engines + o->num_engines);
  if (o->timeout_ms) {
    *timeout = o->timeout_ms;
    opt->call_timeout_ms = o->timeout_ms;
  }
  return CONCCL_OK;
}

// The plan's buffers, still allocated (a freed one would have the launch
// write into whatever took its place).
conccl_status check_plan_buffers(conccl_plan& p) {
  if (!p.plan->attached()) return CONCCL_OK;  // the plan's own call says why
  for (const auto& [id, what] : p.buffers)
    if (!buffer_live(*p.device, id))
      return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the plan's " + what + " (buffer " +
                                                   std::to_string(id) +
                                                   ") was freed after the plan was made: destroy the plan and make "
                                                   "a new one on live buffers");
  return CONCCL_OK;
}

}  // namespace

extern "C" {

conccl_status conccl_comm_create(conccl_device_t dh, const int* gpus, int nranks, const conccl_comm_options* o,
                                 conccl_comm_t* comm) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(gpus && comm, "gpus and comm must not be NULL");
    *comm = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    CONCCL_C_REQUIRE(nranks > 0, "nranks must be positive");
    Communicator::Options opt;
    uint32_t timeout = 60000;
    if (conccl_status st = comm_options_from(o, &opt, &timeout); st != CONCCL_OK) return st;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*d.dev, std::vector<int>(gpus, gpus + nranks), opt);
    return adopt_comm(*d_ref, std::move(c), timeout, comm);
  });
}

conccl_status conccl_get_unique_id(conccl_unique_id* id) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(id, "id is NULL");
    Result<UniqueId> u = make_unique_id();
    if (!u.ok()) return report(u.status());
    std::memcpy(id->bytes, u->bytes.data(), sizeof id->bytes);
    return report(Status());
  });
}

conccl_status conccl_unique_id_to_string(const conccl_unique_id* id, char* buf, size_t capacity) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(id && buf, "id and buf must not be NULL");
    UniqueId u;
    std::memcpy(u.bytes.data(), id->bytes, sizeof id->bytes);
    const std::string s = u.to_string();
    CONCCL_C_REQUIRE(capacity > s.size(), "buf holds " + std::to_string(capacity) + " bytes; the id needs " +
                                              std::to_string(s.size() + 1));
    std::memcpy(buf, s.c_str(), s.size() + 1);
    return report(Status());
  });
}

conccl_status conccl_unique_id_from_string(const char* text, conccl_unique_id* id) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(text && id, "text and id must not be NULL");
    Result<UniqueId> u = UniqueId::parse(text);
    if (!u.ok()) return report(u.status());
    std::memcpy(id->bytes, u->bytes.data(), sizeof id->bytes);
    return report(Status());
  });
}

conccl_status conccl_comm_create_rank(conccl_device_t dh, int rank, int nranks, const conccl_unique_id* id, int gpu,
                                      const conccl_comm_options* o, conccl_comm_t* comm) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(id && comm, "id and comm must not be NULL");
    *comm = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Communicator::Options opt;
    uint32_t timeout = 60000;
    if (conccl_status st = comm_options_from(o, &opt, &timeout); st != CONCCL_OK) return st;
    opt.gpu = gpu;
    opt.join_timeout_ms = timeout;
    UniqueId u;
    std::memcpy(u.bytes.data(), id->bytes, sizeof id->bytes);
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*d.dev, rank, nranks, u, opt);
    return adopt_comm(*d_ref, std::move(c), timeout, comm);
  });
}

int conccl_comm_rank(conccl_comm_t ch) {
  return read_handle<CommTable>(__func__, ch, "comm", int{-1}, [](const conccl_comm& c) { return c.comm->rank(); });
}

conccl_status conccl_comm_destroy(conccl_comm_t ch) {
  return destroy_handle<CommTable>(__func__, ch, "comm", [](conccl_comm& c) {
    c.destroy();
    return Status();
  });
}

int conccl_comm_size(conccl_comm_t ch) {
  return read_handle<CommTable>(__func__, ch, "comm", int{0}, [](const conccl_comm& c) { return c.comm->size(); });
}

size_t conccl_comm_cached_plans(conccl_comm_t ch) {
  return read_handle<CommTable>(__func__, ch, "comm", size_t{0}, [](const conccl_comm& c) {
    return c.comm ? static_cast<size_t>(c.comm->stats().cached_plans) : 0;
  });
}

conccl_status conccl_comm_window_register(conccl_comm_t ch, const conccl_buffer* buffer, conccl_window_t* window) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(buffer && window, "buffer and window must not be NULL");
    *window = nullptr;
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return comm_destroyed();
    Result<Buffer> b = resolve_buffer(*c.device, *buffer, std::string(current_call()) + ": buffer");
    if (!b.ok()) return report(b.status());
    Result<conccl::Window> w = c.comm->register_window(*b);
    if (!w.ok()) return report(w.status().prefix(current_call()));
    auto h = std::make_shared<conccl_window>();
    h->comm = c_ref.value();
    h->window = *w;
    const uint64_t bits = WindowTable::get().add(h);
    c.windows.push_back(bits);
    *window = handle_of<conccl_window_t>(bits);
    return report(Status());
  });
}

conccl_status conccl_comm_window_deregister(conccl_comm_t ch, conccl_window_t wh) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    CONCCL_C_FIND(WindowTable, w, wh, "window");
    std::shared_ptr<conccl_comm> owner = w.comm.lock();
    if (owner.get() != &c)
      return fail(CONCCL_ERR_INVALID_ARGUMENT,
                  std::string(current_call()) + ": the window belongs to another communicator (or a destroyed one)");
    if (!c.comm) return comm_destroyed();
    Status st = c.comm->deregister_window(w.window);
    if (!st.ok()) return report(st.prefix(current_call()));
    (void)WindowTable::get().take(handle_bits(wh));
    std::erase(c.windows, handle_bits(wh));
    return report(Status());
  });
}

conccl_status conccl_comm_get_stats(conccl_comm_t ch, conccl_comm_stats* out) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(out, "stats must not be NULL");
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return comm_destroyed();
    const CommStats s = c.comm->stats();
    out->bootstrap_messages_sent = s.bootstrap_messages_sent;
    out->bootstrap_messages_received = s.bootstrap_messages_received;
    out->calls = s.calls;
    out->window_calls = s.window_calls;
    out->window_plans = s.window_plans;
    return report(Status());
  });
}

conccl_status conccl_comm_get_async_error(conccl_comm_t ch, conccl_status* async_status) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(async_status, "async_status must not be NULL");
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return comm_destroyed();
    const Status st = c.comm->async_error();
    *async_status = code_to_c(st.code());
    last_error() = st.ok() ? std::string() : st.message();
    return CONCCL_OK;
  });
}

conccl_status conccl_comm_get_ranks_gone(conccl_comm_t ch, int* ranks, int capacity, int* count) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(count, "count must not be NULL");
    CONCCL_C_REQUIRE(capacity >= 0, "capacity is " + std::to_string(capacity) + ": give 0 or more");
    CONCCL_C_REQUIRE(ranks || capacity == 0, "ranks is NULL with capacity " + std::to_string(capacity) +
                                                 ": give an array of capacity ints, or capacity 0");
    *count = 0;
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return comm_destroyed();
    const std::vector<int> gone = c.comm->ranks_gone();
    for (size_t i = 0; i < gone.size() && i < static_cast<size_t>(capacity); ++i) ranks[i] = gone[i];
    *count = static_cast<int>(gone.size());
    return report(Status());
  });
}

void conccl_collective_args_init(conccl_collective_args* a) {
  if (!a) return;
  std::memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->peer = 1;
}

conccl_status conccl_plan_create(conccl_comm_t ch, const conccl_collective_args* a, conccl_plan_t* plan) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(a && plan, "args and plan must not be NULL");
    *plan = nullptr;
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    CONCCL_C_REQUIRE(size_ok(a, sizeof(conccl_collective_args)),
                     "args->struct_size is " + std::to_string(a->struct_size) +
                         ": call conccl_collective_args_init first");
    const int op = enum_bits(a->op), variant = enum_bits(a->variant);
    CONCCL_C_REQUIRE(op >= CONCCL_P2P && op <= CONCCL_ALL_TO_ALL, "op " + std::to_string(op) + " is not a conccl_op");
    CONCCL_C_REQUIRE(variant >= CONCCL_VARIANT_AUTO && variant <= CONCCL_VARIANT_PULL,
                     "variant " + std::to_string(variant) + " is not a conccl_variant");
    CONCCL_C_REQUIRE(a->nsend >= 0 && a->nrecv >= 0 && (a->send || a->nsend == 0) && (a->recv || a->nrecv == 0),
                     "send/recv must hold nsend/nrecv buffers");
    auto h = std::make_shared<conccl_plan>();
    h->device = c.device;
    CollectiveArgs args;
    args.op = static_cast<CollOp>(op);
    args.variant = static_cast<Variant>(variant);
    args.bytes = a->bytes;
    args.root = a->root;
    args.peer = a->peer;
    // Every buffer checked against the device's allocations: a freed,
    // foreign or altered struct is refused here, not written through.
    auto take = [&](const conccl_buffer* in, int n, const char* side, std::vector<Buffer>* out) -> conccl_status {
      for (int i = 0; i < n; ++i) {
        const std::string what = std::string(side) + "[" + std::to_string(i) + "]";
        Result<Buffer> b = resolve_buffer(*c.device, in[i], std::string(current_call()) + ": args->" + what, true);
        if (!b.ok()) return report(b.status());
        out->push_back(*b);
        if (in[i].id) h->buffers.emplace_back(in[i].id, what);
      }
      return CONCCL_OK;
    };
    if (conccl_status st = take(a->send, a->nsend, "send", &args.send); st != CONCCL_OK) return st;
    if (conccl_status st = take(a->recv, a->nrecv, "recv", &args.recv); st != CONCCL_OK) return st;
    args.prelaunch = a->prelaunch != 0;
    args.timestamps = a->timestamps != 0;
    Result<std::unique_ptr<Plan>> p = c.comm->plan(args);
    if (!p.ok()) return report(p.status());
    h->plan = std::move(p).value();
    *plan = handle_of<conccl_plan_t>(PlanTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_plan_destroy(conccl_plan_t ph) {
  return destroy_handle<PlanTable>(__func__, ph, "plan", [](conccl_plan& p) {
    p.plan.reset();
    return Status();
  });
}

conccl_status conccl_plan_launch(conccl_plan_t ph, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (conccl_status st = check_plan_buffers(p); st != CONCCL_OK) return st;
    return report(p.plan->launch(after(timeout_ms)));
  });
}

conccl_status conccl_plan_prelaunch(conccl_plan_t ph, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (conccl_status st = check_plan_buffers(p); st != CONCCL_OK) return st;
    return report(p.plan->prelaunch(after(timeout_ms)));
  });
}

conccl_status conccl_plan_release(conccl_plan_t ph) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    return report(p.plan->release());
  });
}

conccl_status conccl_plan_wait(conccl_plan_t ph, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    return report(p.plan->wait(after(timeout_ms)));
  });
}

conccl_variant conccl_plan_variant(conccl_plan_t ph) {
  return read_handle<PlanTable>(__func__, ph, "plan", conccl_variant{CONCCL_VARIANT_AUTO},
                                [](const conccl_plan& p) { return static_cast<conccl_variant>(p.plan->variant()); });
}

conccl_status conccl_plan_completion(conccl_plan_t ph, int rank, uint64_t* address, uint64_t* value) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(address && value, "address and value must not be NULL");
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (!p.plan->attached()) return report(p.plan->wait(Deadline::after_ms(0)));  // names the detachment
    const int n = static_cast<int>(p.plan->args().recv.size());
    if (rank < 0 || rank >= n)
      return fail(CONCCL_ERR_OUT_OF_RANGE, std::string(current_call()) + ": rank " + std::to_string(rank) +
                                               " of a plan over " + std::to_string(n) + " ranks");
    *address = p.plan->arrival(rank).compute_wait(0).address;
    *value = p.plan->arrivals_expected(rank);
    return report(Status());
  });
}

conccl_status conccl_plan_release_by_stores(conccl_plan_t ph, conccl_store* stores, int capacity, int* count) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(count && (stores || capacity == 0), "stores and count must not be NULL");
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    // Checked before the plan is counted as released: the stores must fit.
    CONCCL_C_REQUIRE(capacity >= 2, "capacity " + std::to_string(capacity) + " is too small: give room for 2 stores");
    Result<std::vector<SignalStore>> w = p.plan->release_by_stores();
    if (!w.ok()) return report(w.status());
    *count = static_cast<int>(w->size());
    for (size_t i = 0; i < w->size(); ++i) stores[i] = conccl_store{(*w)[i].va, (*w)[i].value};
    return report(Status());
  });
}

conccl_status conccl_plan_consumed_store(conccl_plan_t ph, conccl_store* store) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(store, "store is NULL");
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    const SignalStore s = p.plan->consumed_store();
    CONCCL_C_REQUIRE(s.va != 0, "conccl_plan_consumed_store before conccl_plan_release_by_stores");
    *store = conccl_store{s.va, s.value};
    return report(Status());
  });
}

conccl_status conccl_plan_enqueue_on_stream(conccl_plan_t ph, void* stream, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (!p.plan->attached()) return report(p.plan->prelaunch(after(timeout_ms)));  // names the detachment
    if (conccl_status st = check_plan_buffers(p); st != CONCCL_OK) return st;
    return report(nv::enqueue_on_stream(p.plan->communicator().device(), *p.plan, stream, after(timeout_ms)));
  });
}

conccl_status conccl_plan_describe(conccl_plan_t ph, char* buf, size_t capacity, size_t* needed) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    return copy_text(p.plan->describe(), buf, capacity, needed);
  });
}

conccl_status conccl_all_gather(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, conccl_comm_t comm,
                                void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::all_gather, send, recv, bytes, 0, comm, stream); });
}

conccl_status conccl_all_to_all(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, conccl_comm_t comm,
                                void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::all_to_all, send, recv, bytes, 0, comm, stream); });
}

conccl_status conccl_broadcast(const conccl_buffer* root_send, const conccl_buffer* recv, size_t bytes, int root,
                               conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::broadcast, root_send, recv, bytes, root, comm, stream); });
}

conccl_status conccl_gather(const conccl_buffer* send, const conccl_buffer* root_recv, size_t bytes, int root,
                            conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::gather, send, root_recv, bytes, root, comm, stream); });
}

conccl_status conccl_scatter(const conccl_buffer* root_send, const conccl_buffer* recv, size_t bytes, int root,
                             conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::scatter, root_send, recv, bytes, root, comm, stream); });
}

}  // extern "C"
