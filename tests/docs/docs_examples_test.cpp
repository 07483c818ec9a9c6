// tests/docs/docs_examples_test.cpp - every ```cpp block of docs/*.md and
// README.md, verbatim, inside a function that gives it its context; built with
// -Werror (an ignored Status is a warning: Status is [[nodiscard]]) and run
// on the emulator where it needs no GPU. DocsExamples.EveryBlockIsHere fails
// when a block of the docs is not found here (indentation aside), so an
// example cannot change in the docs without changing here.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"
#include "conccl/hierarchy.hpp"
#include "conccl/signal.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

// ---- docs/collectives.md -------------------------------------------------

Status collectives_intro(Device& device, uint64_t chunk, const std::vector<Buffer>& send_buffers,
                         const std::vector<Buffer>& recv_buffers) {
  auto comm = conccl::Communicator::create(device, {0, 1, 2, 3, 4, 5, 6, 7}).value();
  conccl::CollectiveArgs a;
  a.op = conccl::CollOp::all_gather;
  a.bytes = chunk;             // per rank
  a.send = send_buffers;       // one conccl::Buffer per rank
  a.recv = recv_buffers;       // ranks * chunk bytes each
  auto plan = comm->plan(a).value();   // validated, compiled; nothing submitted yet
  CONCCL_RETURN_IF_ERROR(plan->launch(conccl::Deadline::after_ms(100)));
  CONCCL_RETURN_IF_ERROR(plan->wait(conccl::Deadline::after_ms(1000)));
  // compute streams: rank r's data is complete when
  // plan->arrival(r).value() >= plan->arrivals_expected(r)
  for (int r = 0; r < comm->size(); ++r)
    if (plan->arrival(r).value() < plan->arrivals_expected(r)) return error(Code::internal, "not complete");
  return Status();
}

int collectives_loopback(Device& device) {
  conccl::Communicator::Options o;
  o.loopback = true;
  auto comm = conccl::Communicator::create(device, {0, 0, 0, 0}, o).value();  // 4 ranks on GPU 0
  return comm->size();
}

// ---- docs/queues.md -----------------------------------------------------

Status queues_record_and_submit(Queue* queue, Signal& signal, uint64_t dst_va, uint64_t src_va, uint64_t fill_va,
                                uint64_t bytes) {
  conccl::CommandBuffer cb = queue->command_buffer();            // for the queue's Isa
  CONCCL_RETURN_IF_ERROR(cb.copy(dst_va, src_va, bytes));        // split into legal commands
  CONCCL_RETURN_IF_ERROR(cb.fill(fill_va, 0xdeadbeef, bytes));   // 32-bit fill (4-byte aligned address and size)
  CONCCL_RETURN_IF_ERROR(signal.signal_add(cb));                // completion (docs/signals.md)
  CONCCL_RETURN_IF_ERROR(queue->record_wake(cb));                // wake host sleepers (SDMA TRAP / Hopper interrupt)
  conccl::QueueSpan span;
  CONCCL_RETURN_IF_ERROR(queue->submit(cb, conccl::Deadline::after_ms(100), &span));     // one doorbell for all
  CONCCL_RETURN_IF_ERROR(queue->wait_done(conccl::Deadline::after_ms(1000), span.end));  // completed() >= span.end
  CONCCL_RETURN_IF_ERROR(signal.wait(1, conccl::Deadline::after_ms(1000), &span));       // or sleep on the queue's progress
  return Status();
}

Status queues_reserve(Queue* queue, Signal& signal, uint64_t dst, uint64_t src, uint64_t bytes, Deadline deadline) {
  auto r = queue->reserve(256, deadline).value();                 // holds the producer lock
  CONCCL_RETURN_IF_ERROR(r.commands().copy(dst, src, bytes));     // encoded in place
  CONCCL_RETURN_IF_ERROR(signal.signal_add(r.commands()));
  conccl::QueueSpan done;
  CONCCL_RETURN_IF_ERROR(r.commit(&done));                        // publishes with one doorbell
  return queue->wait_done(deadline, done.end);
}

// ---- docs/nv-backend.md (compiled only: needs an NVIDIA GPU) ---------------

[[maybe_unused]] Status nv_budget(conccl::nv::Gpu& dev, uint64_t dst, uint64_t src, uint64_t bytes, double window,
                                  Deadline deadline) {
  namespace nv = conccl::nv;
  // bytes to move while a GEMM of about `window` seconds runs
  std::vector<nv::Channel*> chs = dev.channels_for_rate(double(bytes) / window);
  CONCCL_RETURN_IF_ERROR(dev.copy_striped(dst, src, bytes, deadline, chs));
  return Status();
}

// ---- docs/backends.md (compiled only: opens the nv backend) ---------------

[[maybe_unused]] bool backend_settings_example() {
  conccl::DeviceOptions o;
  o.backend = "nv";
  o.settings = "gpus=0,0 interrupt_waits=0";
  auto dev = conccl::open_device(o);
  return dev.ok();
}

// ---- docs/graphs.md (run below on the emulator) ---------------------------

Status graphs_capture(Communicator* comm, std::unique_ptr<HostStream>& stream, const CollectiveArgs& all_gather_args,
                      const std::function<void(std::unique_ptr<HostStream>&)>& produce,
                      const std::function<void(std::unique_ptr<HostStream>&)>& consume) {
  CONCCL_RETURN_IF_ERROR(stream->begin_capture());
  produce(stream);                                                   // the step's work before the call
  CONCCL_RETURN_IF_ERROR(comm->call(all_gather_args, stream.get()));  // recorded, not run
  consume(stream);
  Result<std::unique_ptr<HostStream::Recording>> graph = stream->end_capture();
  if (!graph.ok()) return graph.status();
  for (int i = 0; i < 1000; ++i) CONCCL_RETURN_IF_ERROR((*graph)->launch(*stream));  // each launch: one replay
  return stream->synchronize(Deadline::after_ms(60000));
}

// ---- docs/multinode.md (compiled only: the inter-node engine is the user's) -

struct MyNcclInterNode final : InterNode {
  Status all_gather(const Buffer&, const Buffer&, uint64_t, StreamOps*) override { return unavailable(); }
  Status all_to_all(const Buffer&, const Buffer&, uint64_t, StreamOps*) override { return unavailable(); }
  Status broadcast(const Buffer&, const Buffer&, uint64_t, int, StreamOps*) override { return unavailable(); }
  static Status unavailable() { return error(Code::unavailable, "a sketch: no inter-node engine here"); }
};

[[maybe_unused]] Status multinode_example(Device& dev, int local_rank, int L, const UniqueId& node_id, int node,
                                          int nodes, const Buffer& send, const Buffer& recv, uint64_t count,
                                          StreamOps* stream) {
  auto local = Communicator::create(dev, local_rank, L, node_id);  // one process per rank
  if (!local.ok()) return local.status();
  MyNcclInterNode inter{/* your ncclComm over the ranks of this local rank */};
  auto h = HierCommunicator::create(**local, node, nodes, inter);
  if (!h.ok()) return h.status();
  CONCCL_RETURN_IF_ERROR((*h)->all_reduce(send, recv, count, DataType::bf16, ReduceOp::sum, stream));
  return Status();
}

// ---- docs/emulator.md ----------------------------------------------------

// GPUs x 100 + engines of GPU 0 of the node the example opens.
int emulator_open() {
  conccl::DeviceOptions o;  // backend "emu" is the default
  o.settings = "preset=small gpus=4 engines=2 memory_per_gpu=1G";
  auto dev = conccl::open_device(o).value();
  return dev->gpu_count() * 100 + static_cast<int>(dev->topology().gpus[0].engines.size());
}

// ---- docs/multiprocess.md (run below as one rank of one) ----------------

Status multiprocess_rank(int r, int n, const conccl::UniqueId& id, uint64_t bytes) {
  // Every process: rank r of n, the same id (made once, handed to all).
  conccl::DeviceOptions d;
  d.process_slot = r;  // distinct per process: the rank
  auto dev = conccl::open_device(d).value();
  conccl::Communicator::Options o;
  o.gpu = r;  // this rank's GPU on the device (default: r modulo the GPU count)
  auto comm = conccl::Communicator::create(*dev, r, n, id, o).value();
  conccl::Buffer send = dev->alloc(r, bytes, conccl::MemKind::device).value();
  conccl::Buffer recv = dev->alloc(r, n * bytes, conccl::MemKind::device).value();
  conccl::CollectiveArgs a;
  a.op = conccl::CollOp::all_gather;
  a.bytes = bytes;
  a.send = {send};  // this rank's buffers alone
  a.recv = {recv};
  auto plan = comm->plan(a).value();             // every rank, in the same order
  CONCCL_RETURN_IF_ERROR(plan->launch(conccl::Deadline::after_ms(1000)));
  CONCCL_RETURN_IF_ERROR(plan->wait(conccl::Deadline::after_ms(1000)));  // every rank waits for every launch
  return Status();
}

// docs/multiprocess.md, "Windows": one call through a window.
Status windows_call(conccl::Communicator* comm, const conccl::Buffer& my_buffer, uint64_t chunk, int n,
                    uint64_t recv_offset, conccl::StreamOps* stream) {
  conccl::Window w = comm->register_window(my_buffer).value();  // every rank, once
  conccl::CollectiveArgs a;
  a.op = conccl::CollOp::all_gather;
  a.bytes = chunk;
  a.send = {w.at(0, chunk)};  // the same offsets on every rank
  a.recv = {w.at(recv_offset, chunk * n)};
  // stream: conccl::nv::stream_ops(*dev, cu_stream) (keep one per CUDA
  // stream), a conccl::HostStream, or nullptr to wait here
  CONCCL_RETURN_IF_ERROR(comm->call(a, stream));  // on a stream: returns at once
  return Status();
}

// docs/reductions.md: one all-reduce of this rank's buffers.
Status reductions_call(Communicator* comm, const Buffer& my_send, const Buffer& my_recv, uint64_t n_elements,
                       StreamOps* stream) {
  ReductionArgs a;
  a.coll = ReduceColl::all_reduce;   // reduce_scatter, all_reduce, reduce
  a.dtype = DataType::bf16;          // f32, bf16, f16, i32, i64, u8
  a.op = ReduceOp::sum;              // sum, prod, min, max, avg
  a.count = n_elements;              // NCCL's count (reduce_scatter: recvcount)
  a.send = {my_send};                // one process per rank: this rank's
  a.recv = {my_recv};                // one process: one per rank
  Status st = comm->call_reduction(a, stream);  // stream: StreamOps*, or null
  return st;
}

// ---- the checks --------------------------------------------------------

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Each line without its leading whitespace.
std::string unindent(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t");
    out += (b == std::string::npos ? "" : line.substr(b)) + "\n";
  }
  return out;
}

TEST(DocsExamples, EveryBlockIsHere) {
  const std::string here = unindent(read(DOCS_EXAMPLES_FILE));
  ASSERT_FALSE(here.empty());
  int blocks = 0;
  // README.md and every page of docs/ (a new page is checked without being listed).
  std::vector<std::string> docs = {"README.md"};
  for (const auto& e : std::filesystem::directory_iterator(std::string(CONCCL_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") docs.push_back("docs/" + e.path().filename().string());
  for (const std::string& doc : docs) {
    const std::string text = read(std::string(CONCCL_SOURCE_DIR) + "/" + doc);
    size_t at = 0;
    while ((at = text.find("```c", at)) != std::string::npos) {
      size_t begin;
      if (text.compare(at, 7, "```cpp\n") == 0) begin = at + 7;
      else if (text.compare(at, 7, "```c++\n") == 0) begin = at + 7;
      else {  // ```c, ```console, ...: not C++
        at += 4;
        continue;
      }
      const size_t end = text.find("```", begin);
      ASSERT_NE(end, std::string::npos) << doc << ": unterminated C++ block";
      const std::string block = unindent(text.substr(begin, end - begin));
      EXPECT_NE(here.find(block), std::string::npos)
          << doc << ": this C++ example is not compiled by tests/docs/docs_examples_test.cpp; add it there:\n"
          << block;
      ++blocks;
      at = end + 3;
    }
  }
  EXPECT_GE(blocks, 5);
}

TEST(DocsExamples, EmulatorOpensFromItsSettings) { EXPECT_EQ(emulator_open(), 402); }

// docs/graphs.md's capture, replayed 1000 times with a new input each time.
TEST(DocsExamples, GraphsCaptureReplaysOnAHostStream) {
  DeviceOptions o;
  o.settings = "preset=small";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, emu::create(o));
  Communicator::Options co;
  co.loopback = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 0}, co));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostStream> stream, HostStream::create(*dev));
  const uint64_t bytes = 1000;
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.bytes = bytes;
  std::vector<Buffer> mem;
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK_AND_ASSIGN(Buffer s, dev->alloc(0, bytes, MemKind::device));
    ASSERT_OK_AND_ASSIGN(Buffer d, dev->alloc(0, 2 * bytes, MemKind::device));
    a.send.push_back(s);
    a.recv.push_back(d);
  }
  uint64_t round = 0, wrong = 0;
  auto byte = [](uint64_t round, int rank, uint64_t i) { return uint8_t(1 + (round * 131 + rank * 17 + i * 7) % 251); };
  auto produce = [&](std::unique_ptr<HostStream>& s) {
    ASSERT_OK(s->enqueue([&] {
      ++round;
      for (int r = 0; r < 2; ++r)
        for (uint64_t i = 0; i < bytes; ++i) a.send[size_t(r)].as<uint8_t>()[i] = byte(round, r, i);
    }));
  };
  auto consume = [&](std::unique_ptr<HostStream>& s) {
    ASSERT_OK(s->enqueue([&] {
      for (int d = 0; d < 2; ++d)
        for (int q = 0; q < 2; ++q)
          for (uint64_t i = 0; i < bytes; ++i) wrong += a.recv[size_t(d)].as<uint8_t>()[q * bytes + i] != byte(round, q, i);
    }));
  };
  ASSERT_OK(graphs_capture(comm.get(), stream, a, produce, consume));
  EXPECT_EQ(round, 1000u);
  EXPECT_EQ(wrong, 0u);
  ASSERT_OK(comm->async_error());
  comm.reset();
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK(dev->free(a.send[size_t(r)]));
    ASSERT_OK(dev->free(a.recv[size_t(r)]));
  }
}

TEST(DocsExamples, MultiprocessRunsAsOneRank) {
  ASSERT_OK(multiprocess_rank(0, 1, make_unique_id().value(), 4096));
}

// A device of process slot 0 and a communicator of one rank on it: the
// examples that take one rank of a job run as the whole job.
void open_one_rank(std::unique_ptr<Device>* dev, std::unique_ptr<Communicator>* comm) {
  DeviceOptions d;
  d.process_slot = 0;
  ASSERT_OK_AND_ASSIGN(*dev, open_device(d));
  ASSERT_OK_AND_ASSIGN(*comm, Communicator::create(**dev, 0, 1, make_unique_id().value(), Communicator::Options{}));
}

TEST(DocsExamples, WindowsCallRunsAsOneRankOnAHostStream) {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Communicator> comm;
  ASSERT_NO_FATAL_FAILURE(open_one_rank(&dev, &comm));
  const uint64_t chunk = 4096 + 64, recv_offset = 64 << 10;
  ASSERT_OK_AND_ASSIGN(Buffer mem, dev->alloc(0, 128 << 10, MemKind::device));
  std::mt19937_64 rng(11);
  for (uint64_t i = 0; i < chunk / 8; ++i) mem.as<uint64_t>()[i] = rng();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostStream> stream, HostStream::create(*dev));
  ASSERT_OK(windows_call(comm.get(), mem, chunk, 1, recv_offset, stream.get()));
  ASSERT_OK(stream->synchronize(Deadline::after_ms(10000)));
  ASSERT_OK(comm->async_error());
  EXPECT_EQ(std::memcmp(mem.as<uint8_t>() + recv_offset, mem.as<uint8_t>(), chunk), 0);
  comm.reset();
  ASSERT_OK(dev->free(mem));
}

TEST(DocsExamples, ReductionRunsAsOneRankOnAHostStream) {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Communicator> comm;
  ASSERT_NO_FATAL_FAILURE(open_one_rank(&dev, &comm));
  const uint64_t count = 3001;
  ASSERT_OK_AND_ASSIGN(Buffer send, dev->alloc(0, count * 2, MemKind::device));
  ASSERT_OK_AND_ASSIGN(Buffer recv, dev->alloc(0, count * 2, MemKind::device));
  std::mt19937 rng(13);
  for (uint64_t i = 0; i < count; ++i) send.as<uint16_t>()[i] = float_to_bf16(static_cast<float>(rng() % 1000) / 7.0f);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostStream> stream, HostStream::create(*dev));
  ASSERT_OK(reductions_call(comm.get(), send, recv, count, stream.get()));
  ASSERT_OK(stream->synchronize(Deadline::after_ms(10000)));
  // One rank: the sum is its own input.
  EXPECT_EQ(std::memcmp(recv.host, send.host, count * 2), 0);
  comm.reset();
  ASSERT_OK(dev->free(send));
  ASSERT_OK(dev->free(recv));
}

TEST(DocsExamples, CollectivesRunOnTheEmulator) {
  DeviceOptions o;
  o.settings = "preset=mi300x";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Device> dev, open_device(o));
  const uint64_t chunk = 8192 + 64;
  std::vector<Buffer> send, recv;
  std::mt19937_64 rng(5);
  for (int r = 0; r < 8; ++r) {
    ASSERT_OK_AND_ASSIGN(Buffer s, dev->alloc(r, chunk, MemKind::device));
    ASSERT_OK_AND_ASSIGN(Buffer d, dev->alloc(r, chunk * 8, MemKind::device));
    for (uint64_t i = 0; i < chunk / 8; ++i) s.as<uint64_t>()[i] = rng();
    send.push_back(s);
    recv.push_back(d);
  }
  ASSERT_OK(collectives_intro(*dev, chunk, send, recv));
  for (int d = 0; d < 8; ++d)
    for (int s = 0; s < 8; ++s)
      ASSERT_EQ(std::memcmp(recv[d].as<uint8_t>() + s * chunk, send[s].host, chunk), 0) << d << " <- " << s;
  EXPECT_EQ(collectives_loopback(*dev), 4);
}

TEST(DocsExamples, QueuesRunOnTheEmulator) {
  DeviceOptions o;
  o.settings = "preset=mi300x";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Device> dev, open_device(o));
  const uint64_t n = 4096;
  ASSERT_OK_AND_ASSIGN(Buffer src, dev->alloc(0, n, MemKind::device));
  ASSERT_OK_AND_ASSIGN(Buffer dst, dev->alloc(0, n, MemKind::device));
  ASSERT_OK_AND_ASSIGN(Buffer fill, dev->alloc(0, n, MemKind::device));
  std::mt19937 rng(3);
  for (uint64_t i = 0; i < n; ++i) src.as<uint8_t>()[i] = static_cast<uint8_t>(rng());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Queue> q, dev->create_queue(0, dev->topology().gpus[0].engines[0].id));
  ASSERT_OK_AND_ASSIGN(Signal sig, Signal::create(*dev));
  ASSERT_OK(queues_record_and_submit(q.get(), sig, dst.va, src.va, fill.va, n));
  EXPECT_EQ(std::memcmp(dst.host, src.host, n), 0);
  for (uint64_t i = 0; i < n / 4; ++i) ASSERT_EQ(fill.as<uint32_t>()[i], 0xdeadbeefu);
  std::memset(dst.host, 0, n);
  ASSERT_OK(queues_reserve(q.get(), sig, dst.va, src.va, n, Deadline::after_ms(1000)));
  EXPECT_EQ(std::memcmp(dst.host, src.host, n), 0);
  EXPECT_EQ(sig.value(), 2u);
}

}  // namespace
}  // namespace conccl
