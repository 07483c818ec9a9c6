// conccl/commands.hpp - the DMA command vocabulary every engine speaks.
//
// One small vocabulary (tinygrad's hardware queues - runtime/support/hcq.py:
// copy, signal, wait, timestamp, submit - and Linux's amdgpu_buffer_funcs are
// the models): copy, fill, signal add/set, wait until a 64-bit signal is >= a
// value, timestamp. A CommandBuffer records it for one instruction set (Isa),
// lowered to AMD SDMA packets or to NVIDIA Hopper copy-engine and host
// methods. What an engine can do is data (Caps), so that code above the
// backends never branches on the packet format.
//
// This header names no packet: commands of one instruction set only (an SDMA
// FENCE or POLL_REGMEM, a Hopper SET_OBJECT) are appended by that set's
// encoder, conccl/sdma_packets.hpp or conccl/hopper_methods.hpp, into a
// CommandBuffer of that set. See docs/architecture.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conccl/status.hpp"

namespace conccl {

namespace sdma {
enum class Gen : uint8_t;  // an SDMA packet generation (conccl/packets/generation.hpp)
}
namespace lower {
struct Writer;  // the lowerings' and encoders' door into a CommandBuffer (src/commands/lowering.hpp)
}

// The command set an engine executes.
enum class IsaKind : uint8_t {
  sdma,       // AMD SDMA packets of one generation (packets/sdma_layout.hpp)
  hopper_ce,  // NVIDIA HOPPER_DMA_COPY_A + HOPPER_CHANNEL_GPFIFO_A host methods
};

// Which instruction set a buffer or queue speaks: a kind and, for SDMA, the
// packet generation. Made only by its factories; compared by value.
class Isa {
 public:
  constexpr Isa() = default;  // SDMA 4.4.2 (MI300)
  static Isa sdma_gen(sdma::Gen g) { return Isa(IsaKind::sdma, g); }
  static Isa hopper() { return Isa(IsaKind::hopper_ce, kDefaultGen); }
  constexpr IsaKind kind() const { return kind_; }
  bool is_sdma() const { return kind_ == IsaKind::sdma; }
  // The SDMA generation (for kind() == sdma; meaningless otherwise).
  constexpr sdma::Gen gen() const { return gen_; }
  // "SDMA 4.4.2", "Hopper CE"
  std::string name() const;
  bool operator==(const Isa& o) const { return kind_ == o.kind_ && (kind_ != IsaKind::sdma || gen_ == o.gen_); }

 private:
  // sdma::Gen::v4_4_2, by number: the enum's values live in
  // conccl/packets/generation.hpp, which this header does not include
  // (command_buffer.cpp checks that they agree).
  static constexpr sdma::Gen kDefaultGen = static_cast<sdma::Gen>(2);
  constexpr Isa(IsaKind kind, sdma::Gen gen) : kind_(kind), gen_(gen) {}
  IsaKind kind_ = IsaKind::sdma;
  sdma::Gen gen_ = kDefaultGen;
};

// Parses "hopper-ce" (or "Hopper CE") or an SDMA generation ("4.4.2",
// "SDMA 4.4.2", "5.2", ...).
Result<Isa> parse_isa(const std::string& name);

// What an engine can do, as data. caps(isa) gives the instruction set's;
// a queue may narrow them (Queue::caps(): e.g. no 64-bit atomics over a link
// that lacks them).
struct Caps {
  uint64_t max_copy_bytes = 0;   // largest single copy command (bigger copies are split)
  uint64_t max_fill_bytes = 0;   // largest single fill command
  bool broadcast_copy = false;   // copy_bcst: one command, two destinations
  bool swap = false;             // swap: exchange two ranges in one command
  bool atomic64 = false;         // signal_add is a 64-bit atomic in the memory system
  bool copy_add = false;         // copy_add is one command: the copy adds to the signal as it ends
  bool interrupt_wakeup = false; // the engine can wake a sleeping host thread
  bool signal_twin = false;      // signals carry value + 2^31 at +8 (exact >= waits with 32-bit polls)
  // A store into a signal costs the engine less than an add (Hopper: an add
  // into host memory is a PCIe atomic the engine waits for, 1.2-2.2 us per
  // list on an H100): small all-gathers of one process pull (choose_variant).
  bool store_beats_add = false;
  uint32_t timestamp_offset = 0; // timestamp(slot) writes the engine time at slot + this
  uint32_t signal_align = 8;     // signal address alignment
  uint32_t timestamp_align = 8;  // timestamp slot alignment
};
const Caps& caps(const Isa& isa);

// Records commands for one Isa. Each command appends whole packets (or
// method headers) or nothing: a failed command leaves the buffer unchanged.
// A CommandBuffer built over caller storage (the ring space a Queue reserved)
// writes there and fails with Code::resource_exhausted when it is full.
class CommandBuffer {
 public:
  explicit CommandBuffer(Isa isa = Isa{});
  explicit CommandBuffer(sdma::Gen gen) : CommandBuffer(Isa::sdma_gen(gen)) {}
  // Records into fixed storage (see Queue::reserve).
  CommandBuffer(Isa isa, std::span<uint32_t> storage);
  CommandBuffer(const CommandBuffer& o);
  CommandBuffer& operator=(const CommandBuffer& o);
  CommandBuffer(CommandBuffer&& o) noexcept;
  CommandBuffer& operator=(CommandBuffer&& o) noexcept;
  ~CommandBuffer();

  const Isa& isa() const { return isa_; }
  const Caps& caps() const { return *caps_; }
  // The SDMA generation (for SDMA buffers).
  sdma::Gen gen() const { return isa_.gen(); }

  // ---- the vocabulary -----------------------------------------------------
  // Whether a copy waits for the copies recorded before it to finish
  // (the default), or may run alongside them: for a copy that reads nothing
  // they write and writes nothing they read or write, such as a list's
  // copies of one source to several destinations. Hopper: NON_PIPELINED or
  // PIPELINED (clc8b5.h LAUNCH_DMA DATA_TRANSFER_TYPE); SDMA runs its
  // packets in order either way.
  enum class CopyOrder : uint8_t { after_earlier, alongside_earlier };
  // What an engine does while a wait is not yet satisfied. yield: a Hopper
  // channel whose acquire fails gives its engine to other channels
  // (ACQUIRE_SWITCH_TSG), for waits that another channel on the same engine
  // may release; hold: it keeps the engine and retries, for waits that
  // something else releases (a stream's store, a kernel), where being
  // switched out costs the time until the scheduler returns. SDMA polls the
  // same way for both.
  enum class WaitStyle : uint8_t { yield, hold };
  Status copy(uint64_t dst, uint64_t src, uint64_t bytes,
              CopyOrder order = CopyOrder::after_earlier);  // split into legal commands
  Status copy_bcst(uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes);  // caps().broadcast_copy
  Status swap(uint64_t a, uint64_t b, uint64_t bytes);                            // caps().swap
  Status fill(uint64_t dst, uint32_t value, uint64_t bytes);  // dst, bytes 4-aligned
  // Signals (conccl/signal.hpp) by address, in the layout caps() describes:
  // add `delta` after all earlier commands' writes; store `value`; make the
  // engine wait until the 64-bit value is >= `value`.
  Status signal_add(uint64_t signal_va, uint64_t delta = 1);
  // A copy, then `delta` added to the signal once the copy's writes are
  // visible (its own writes: a copy alongside earlier ones is not ordered
  // after theirs). Where caps().copy_add the copy's last command adds as it
  // ends (Hopper: the LAUNCH_DMA's semaphore reduction, no wait for the
  // engine to drain); elsewhere it is copy() then signal_add().
  Status copy_add(uint64_t dst, uint64_t src, uint64_t bytes, CopyOrder order, uint64_t signal_va,
                  uint64_t delta = 1);
  Status signal_set(uint64_t signal_va, uint64_t value);
  Status wait_ge(uint64_t signal_va, uint64_t value, WaitStyle style = WaitStyle::yield);
  // Re-encodes the wait_ge recorded at dword `at` (`dwords` long, as
  // size_dwords() before and after it said) for a new signal value, in
  // place: how a list recorded once waits for a value that grows with each
  // launch (Communicator::call). The new encoding must have the same length.
  Status rewrite_wait_ge(size_t at, size_t dwords, uint64_t signal_va, uint64_t value,
                         WaitStyle style = WaitStyle::yield);
  // The engine's clock into a 16-byte slot; it lands at slot + caps().timestamp_offset.
  Status timestamp(uint64_t slot_va);
  // Pre-encoded dwords of this Isa; decoded to find command boundaries and
  // rejected if they do not decode.
  Status raw(std::span<const uint32_t> dwords);
  // Every command of `other` (a buffer of the same Isa), after this
  // buffer's: how several lists for one queue become one submission.
  Status append(const CommandBuffer& other);

  // ---- size limit ----------------------------------------------------------
  // The most bytes of commands this buffer holds. A command that would take it
  // past the limit is refused (Code::resource_exhausted, nothing appended);
  // copy, copy_bcst, swap and fill compute their encoded size first, so a size
  // that can never be submitted fails at once instead of encoding packets until
  // memory runs out. Over caller storage the limit is the storage's size;
  // otherwise kMaxBytes, the largest ring a queue can have, until
  // set_max_bytes() changes it (e.g. to Queue::max_submit_bytes(), what one
  // submission to that queue takes).
  static constexpr size_t kMaxBytes = size_t(1) << 30;
  size_t max_bytes() const { return max_bytes_; }
  // Refuses a limit below what is already recorded or, over caller storage,
  // above the storage's size.
  Status set_max_bytes(size_t bytes);
  // Bytes of commands copy() / fill() would append for these arguments,
  // computed without encoding (0 for 0 bytes, and for a fill size that is not
  // a multiple of 4). What copy() and fill() check against max_bytes().
  uint64_t copy_encoded_bytes(uint64_t dst, uint64_t src, uint64_t bytes) const;
  uint64_t fill_encoded_bytes(uint64_t bytes) const;

  // ---- contents ------------------------------------------------------------
  std::span<const uint32_t> dwords() const { return {data_, size_}; }
  size_t size_bytes() const { return size_ * 4; }
  size_t packet_count() const { return starts_.size(); }
  // Dword offset of each packet (SDMA) or method header (Hopper).
  std::span<const uint32_t> packet_starts() const { return starts_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    size_ = 0;
    starts_.clear();
  }
  // The commands as text, one per line (the disassembler of the Isa).
  std::string disassemble() const;
  // Dwords recorded: where the next command starts (rewrite_wait_ge's `at`).
  size_t size_dwords() const { return size_; }

 private:
  // Lowerings and encoders append through lower::Writer: space for n more
  // dwords (null when full), where a command starts, and dropping what a
  // failed command appended.
  friend struct lower::Writer;
  uint32_t* grow(size_t n);
  void mark(size_t at) { starts_.push_back(static_cast<uint32_t>(at)); }
  void truncate(size_t dwords, size_t packets) {
    size_ = dwords;
    starts_.resize(packets);
  }
  Status need_cap(bool have, const char* what) const;
  // copy()'s checks of its ranges and of the room its `encoded` bytes need.
  Status check_copy(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t encoded) const;
  Status check_signal(uint64_t va) const;
  // Refuses a command of `bytes` (what it moves or fills) that would append
  // `encoded` bytes past max_bytes(), naming the limit and how to split it
  // (pieces of at most `piece` bytes, each `piece_encoded` bytes of commands,
  // after `fixed` bytes the command adds once).
  Status check_room(const char* what, uint64_t bytes, uint64_t encoded, uint64_t fixed, uint64_t piece,
                    uint64_t piece_encoded) const;
  // Where max_bytes_ comes from, for the message that refuses a command.
  enum class Limit : uint8_t { largest_ring, storage, set };
  Isa isa_;
  const Caps* caps_;
  uint32_t* data_ = nullptr;
  size_t size_ = 0, cap_ = 0;
  size_t max_bytes_ = kMaxBytes;
  Limit limit_ = Limit::largest_ring;
  bool owned_ = true;
  std::vector<uint32_t> starts_;
};

}  // namespace conccl
