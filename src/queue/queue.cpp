// src/queue/queue.cpp - what every ring protocol shares: the producer lock,
// submit and reservations, and the default wait policy.
#include "conccl/queue.hpp"

#include "util/wait.hpp"

namespace conccl {

Queue::~Queue() = default;

uint64_t Queue::submitted() const { return last_ticket_.load(std::memory_order_acquire); }

Status Queue::submit(const CommandBuffer& cb, Deadline deadline, QueueSpan* span) {
  return submit_impl(cb, deadline, span, false);
}

Status Queue::submit_held(const CommandBuffer& cb, Deadline deadline, QueueSpan* span) {
  return submit_impl(cb, deadline, span, true);
}

Status Queue::submit_impl(const CommandBuffer& cb, Deadline deadline, QueueSpan* span, bool hold) {
  if (!(cb.isa() == isa_))
    return error(Code::invalid_argument, "command buffer was recorded for " + cb.isa().name() +
                                             " but the queue's engine speaks " + isa_.name() +
                                             "; record it with queue.command_buffer()");
  std::lock_guard<std::mutex> lock(submit_mu_);
  const uint64_t before = last_ticket_.load(std::memory_order_relaxed);
  if (span) *span = QueueSpan{this, before, before};
  if (cb.empty()) return Status();
  hold_ = hold;
  Result<uint64_t> t = ring_submit(cb, deadline);
  hold_ = false;
  if (!t.ok()) return t.status();
  last_ticket_.store(*t, std::memory_order_release);
  if (span) span->end = *t;
  return Status();
}

void Queue::hold(uint64_t ticket, uint64_t position) {
  held_.push_back({ticket, position});
  held_to_.store(ticket, std::memory_order_release);
}

void Queue::forget_held(uint64_t position) {
  while (!held_.empty() && held_.front().position <= position) held_.pop_front();
  held_to_.store(held_.empty() ? 0 : held_.back().ticket, std::memory_order_release);
}

void Queue::release(uint64_t end) {
  if (held_to_.load(std::memory_order_acquire) == 0) return;  // nothing held: no lock
  std::lock_guard<std::mutex> lock(submit_mu_);
  uint64_t position = 0;
  for (const HeldWork& h : held_)
    if (h.ticket <= end) position = h.position;
  if (position) ring_expose(position);
}

Result<Queue::Reservation> Queue::reserve(size_t bytes, Deadline deadline) {
  if (bytes == 0 || (bytes & 3))
    return error(Code::invalid_argument, "reserve(" + std::to_string(bytes) +
                                             "): give a positive multiple of 4 bytes of commands");
  std::unique_lock<std::mutex> lock(submit_mu_);
  Status why;
  uint32_t* p = ring_reserve(bytes, deadline, &why);
  if (!p) return why;
  return Reservation(this, std::move(lock), CommandBuffer(isa_, std::span<uint32_t>(p, bytes / 4)));
}

Queue::Reservation::Reservation(Queue* q, std::unique_lock<std::mutex> lock, CommandBuffer cb)
    : q_(q), lock_(std::move(lock)), cb_(std::move(cb)) {}

Queue::Reservation::Reservation(Reservation&& o) noexcept
    : q_(o.q_), lock_(std::move(o.lock_)), cb_(std::move(o.cb_)) {
  o.q_ = nullptr;
}

Queue::Reservation& Queue::Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    if (q_ && lock_.owns_lock()) q_->ring_abandon();
    q_ = o.q_;
    lock_ = std::move(o.lock_);
    cb_ = std::move(o.cb_);
    o.q_ = nullptr;
  }
  return *this;
}

Queue::Reservation::~Reservation() {
  if (q_ && lock_.owns_lock()) q_->ring_abandon();
}

Status Queue::Reservation::commit(QueueSpan* span) {
  if (!q_ || !lock_.owns_lock())
    return error(Code::invalid_argument, "commit() on a reservation that was already committed or moved from");
  const uint64_t before = q_->last_ticket_.load(std::memory_order_relaxed);
  uint64_t t = before;
  if (!cb_.empty()) {
    t = q_->ring_commit(cb_.size_bytes());
    q_->last_ticket_.store(t, std::memory_order_release);
  } else {
    q_->ring_abandon();
  }
  if (span) *span = QueueSpan{q_, before, t};
  lock_.unlock();
  q_ = nullptr;
  return Status();
}

Status Queue::wait_done(Deadline deadline, uint64_t end) {
  const uint64_t published = submitted();
  const uint64_t target = end > published ? published : end;
  release(target);  // held work the caller waits for
  for (int i = 0; i < 256; ++i) {
    if (completed() >= target) return Status();
    util::cpu_relax();
  }
  while (completed() < target) {
    if (engine_halted())
      return error(Code::device_fault, "the engine halted before completing ticket " + std::to_string(target) +
                                           ". " + diagnose());
    if (deadline.expired()) {
      if (completed() >= target) break;
      return error(Code::timeout, "deadline passed waiting for the engine to complete ticket " +
                                      std::to_string(target) + ". " + diagnose());
    }
    wait_for_progress(completed(), deadline);
  }
  return Status();
}

}  // namespace conccl
