// src/c_api/handles.hpp - the C API's handles: values that name an object,
// never pointers into it, so that a stale handle is an error and not a
// use of freed memory.
//
// A handle's bits: tag 0xCC (8) | generation (24) | kind (8) | slot index + 1
// (24). The tag sits where a user-space pointer on x86-64 and AArch64 has
// zeros, so a pointer of another library is always named as such and never
// read as some kind by chance (its bits 24..31 are random under ASLR). Its slot
// holds the object while it lives; destroying it bumps the slot's generation,
// so the old handle no longer matches (a double destroy, a use after destroy,
// a handle of a closed device), and one kind's handle given for another
// (a queue for a signal) is named as such. The handle is cast to the C
// header's pointer type but never dereferenced.
//
// One mutex guards every table: lookups are short, and closing a device
// walks several tables at once (its queues, signals, communicators). A
// lookup returns a shared_ptr, so an object stays alive for the call that
// found it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "conccl/status.hpp"

namespace conccl::capi {

enum class HandleKind : uint8_t { device = 1, queue = 2, signal = 3, comm = 4, plan = 5, window = 6, heap = 7, hier = 8 };

inline const char* handle_kind_name(uint64_t kind) {
  switch (kind) {
    case 1: return "device";
    case 2: return "queue";
    case 3: return "signal";
    case 4: return "communicator";
    case 5: return "plan";
    case 6: return "window";
    case 7: return "heap";
    case 8: return "hierarchical communicator";
    default: return nullptr;
  }
}

inline std::mutex& handles_mutex() {
  static std::mutex m;
  return m;
}

template <typename T, HandleKind K>
class HandleTable {
 public:
  static HandleTable& get() {
    static HandleTable t;
    return t;
  }

  // A new handle for `obj` (never 0).
  uint64_t add(std::shared_ptr<T> obj) {
    std::lock_guard<std::mutex> lock(handles_mutex());
    size_t i;
    if (!free_.empty()) {
      i = free_.front();
      free_.erase(free_.begin());  // oldest freed first: a slot is reused as late as possible
    } else {
      i = slots_.size();
      slots_.push_back(Slot{});
    }
    slots_[i].obj = std::move(obj);
    return (kTag << 56) | (uint64_t{slots_[i].generation} << 32) | (uint64_t{static_cast<uint8_t>(K)} << 24) | (i + 1);
  }

  // The object of handle `h`, or an error naming what is wrong with it.
  Result<std::shared_ptr<T>> find(uint64_t h) const {
    std::lock_guard<std::mutex> lock(handles_mutex());
    return find_locked(h);
  }

  // Removes `h` and returns its object (destroyed when the last user lets go).
  Result<std::shared_ptr<T>> take(uint64_t h) {
    std::lock_guard<std::mutex> lock(handles_mutex());
    Result<std::shared_ptr<T>> r = find_locked(h);
    if (r.ok()) release_slot(static_cast<size_t>((h & 0xffffff) - 1));
    return r;
  }

  // Removes every live object for which pred(obj) holds (a closing device's
  // children) and returns them.
  template <typename Pred>
  std::vector<std::shared_ptr<T>> take_if(Pred pred) {
    std::lock_guard<std::mutex> lock(handles_mutex());
    std::vector<std::shared_ptr<T>> out;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].obj && pred(*slots_[i].obj)) {
        out.push_back(slots_[i].obj);
        release_slot(i);
      }
    return out;
  }

 private:
  static constexpr uint64_t kTag = 0xCC;
  static constexpr uint32_t kGenerationMask = 0xffffff;

  struct Slot {
    uint32_t generation = 1;  // 24 bits used
    std::shared_ptr<T> obj;
  };
  std::vector<Slot> slots_;
  std::vector<size_t> free_;

  Result<std::shared_ptr<T>> find_locked(uint64_t h) const {
    const char* noun = handle_kind_name(static_cast<uint64_t>(K));
    if (h == 0) return error(Code::invalid_argument, std::string(noun) + " handle is NULL");
    const uint64_t kind = (h >> 24) & 0xff, index = h & 0xffffff;
    const uint32_t gen = static_cast<uint32_t>(h >> 32) & kGenerationMask;
    if ((h >> 56) != kTag)
      return error(Code::invalid_argument, "not a ConCCL " + std::string(noun) +
                                               " handle (a pointer of another library, or corrupted)");
    if (kind != static_cast<uint64_t>(K)) {
      const char* other = handle_kind_name(kind);
      return error(Code::invalid_argument, other ? std::string("a ") + other + " handle was given where a " + noun +
                                                       " handle is expected"
                                                 : "not a ConCCL " + std::string(noun) +
                                                       " handle (a pointer of another library, or corrupted)");
    }
    if (index == 0 || index > slots_.size() || slots_[index - 1].generation != gen || !slots_[index - 1].obj)
      return error(Code::invalid_argument,
                   std::string("the ") + noun +
                       " handle was destroyed (a use or destroy after destroy, or its device was closed): make a new one");
    return slots_[index - 1].obj;
  }

  void release_slot(size_t i) {
    slots_[i].obj.reset();
    slots_[i].generation = (slots_[i].generation + 1) & kGenerationMask;
    if (slots_[i].generation == 0) slots_[i].generation = 1;
    free_.push_back(i);
  }
};

}  // namespace conccl::capi
