// src/c_api/heap.cpp - symmetric heaps (include/conccl/conccl.h, "symmetric
// heaps"): one buffer per rank, registered once as a window of the
// communicator, carved by a deterministic allocator so that the same
// allocations and frees give the same offsets on every rank; and PyTorch's
// pluggable-allocator entry points over the heap made current.
//
// The heap's memory is one buffer record of its device (conccl_c.cpp's
// record_buffer): nv, CUDA VMM memory as conccl_buffer_alloc_cuda makes it;
// other backends, Device::alloc device memory. conccl_heap_buffer hands out
// sub-ranges of that record, which resolve_buffer accepts like any sub-range
// of an allocation, and which Communicator::window_of finds in the window.
// The record is 512 bytes longer than the heap's usable bytes: no range of
// the heap is the whole record, so conccl_buffer_free and
// conccl_buffer_unregister_cuda (which take only whole allocations) refuse
// every struct the heap gives out, and the memory is freed only here, or when
// its device is closed (close_device frees every record).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "c_api/c_objects.hpp"
#include "conccl/bootstrap.hpp"
#include "util/free_ranges.hpp"

namespace conccl::capi {

// First fit over offsets, every offset and size a multiple of kAlign: a pure
// function of the sequence of calls, so equal sequences on the ranks give
// equal offsets.
class HeapAllocator {
 public:
  static constexpr uint64_t kAlign = 512;

  void reset(uint64_t bytes) {
    free_.clear();
    used_.clear();
    size_ = bytes;
    used_bytes_ = 0;
    if (bytes) free_[0] = bytes;
  }

  // The offset of `bytes` (0 counts as 1) rounded up to kAlign, at the lowest
  // free offset where it fits; nullopt when no free range is large enough.
  std::optional<uint64_t> allocate(uint64_t bytes) {
    const uint64_t need = round_up(std::max<uint64_t>(bytes, 1));
    if (need == 0) return std::nullopt;  // overflowed
    // Every free range starts at a multiple of kAlign, so the first with room
    // is taken from its start.
    const std::optional<uint64_t> off = util::take_first_fit(free_, need, kAlign);
    if (!off) return std::nullopt;
    used_[*off] = {need, bytes};
    used_bytes_ += need;
    return off;
  }

  struct Block {
    uint64_t rounded = 0;
    uint64_t requested = 0;
  };
  // Frees the allocation that starts at `off`; nullopt if none does.
  std::optional<Block> release(uint64_t off) {
    auto it = used_.find(off);
    if (it == used_.end()) return std::nullopt;
    const Block b{it->second.first, it->second.second};
    used_.erase(it);
    used_bytes_ -= b.rounded;
    util::give_back(free_, off, b.rounded);  // merged with the free ranges on either side
    return b;
  }

  // The live allocation holding `off`: its start, or nullopt.
  std::optional<uint64_t> holder(uint64_t off) const {
    auto it = used_.upper_bound(off);
    if (it == used_.begin()) return std::nullopt;
    --it;
    if (off < it->first + it->second.first) return it->first;
    return std::nullopt;
  }

  uint64_t size() const { return size_; }
  uint64_t used() const { return used_bytes_; }
  size_t allocations() const { return used_.size(); }
  uint64_t largest_free() const {
    uint64_t m = 0;
    for (const auto& [off, len] : free_) m = std::max(m, len);
    return m;
  }

  static uint64_t round_up(uint64_t v) {
    if (v > std::numeric_limits<uint64_t>::max() - (kAlign - 1)) return 0;
    return (v + kAlign - 1) / kAlign * kAlign;
  }

 private:
  uint64_t size_ = 0;
  uint64_t used_bytes_ = 0;
  util::FreeRanges free_;                                   // offset -> bytes: disjoint, never adjacent
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> used_;  // offset -> (rounded, requested bytes)
};

}  // namespace conccl::capi

// A heap: its communicator (the heap works only while it lives), its device,
// the window and the buffer record of its memory, and the allocator's state.
struct conccl_heap {
  std::weak_ptr<conccl_comm> comm;
  std::shared_ptr<conccl_device> device;
  conccl::Window window;
  conccl_buffer whole{};  // the record's struct: usable bytes + the 512-byte tail
  uint64_t base = 0;      // pointer of offset 0: CUDA pointer (nv), va (other backends)
  size_t bytes = 0;       // usable bytes
  int cuda_device = -1;   // nv: CUDA ordinal of the memory
  std::mutex mu;          // guards `alloc` (PyTorch may allocate and free from several threads)
  conccl::capi::HeapAllocator alloc;
};

using namespace conccl;
using namespace conccl::capi;

namespace conccl::capi {
using HeapTable = HandleTable<conccl_heap, HandleKind::heap>;
}  // namespace conccl::capi

namespace {

// Live heaps (for conccl_heap_torch_free, which finds the heap by pointer),
// the current heap's handle (for conccl_heap_torch_alloc), and the latest
// message of a failed torch entry point.
struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<conccl_heap>> heaps;
  uint64_t current = 0;
  std::string torch_error;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: PyTorch may free into it during exit
  return *r;
}

std::string describe(const conccl_heap& h) {
  return "the heap [" + hex(h.base) + ", " + hex(h.base + h.bytes) + ") of " + std::to_string(h.bytes) + " bytes";
}

// Its communicator alive, or the call's error (the heap's own failure names it).
conccl_status check_alive(const conccl_heap& h) {
  std::shared_ptr<conccl_comm> c = h.comm.lock();
  if (!c || !c->comm || !h.device->dev)
    return fail(CONCCL_ERR_INVALID_ARGUMENT,
                std::string(current_call()) + ": the heap's communicator was destroyed (or its device closed): the " +
                    "heap is unusable; conccl_heap_destroy releases what is left of it");
  return CONCCL_OK;
}

// Frees the heap's memory record, if its device still has it (closing the
// device frees it first).
Status free_memory(conccl_heap& h) {
  conccl_device& d = *h.device;
  conccl_buffer_record rec;
  {
    std::lock_guard<std::mutex> lock(d.buffers_mutex);
    auto it = d.buffers.find(h.whole.id);
    if (it == d.buffers.end() || !d.dev) return Status();
    rec = it->second;
    d.buffers.erase(it);
  }
  if (rec.origin == conccl_buffer_record::Origin::cuda_alloc) {
    CONCCL_RETURN_IF_ERROR(nv::unregister_cuda(*d.dev, rec.cpp));
    nv::CudaAlloc a = rec.cuda;
    return nv::cuda_free(a);
  }
  return d.dev->free(rec.cpp);
}

std::string out_of_heap(const conccl_heap& h, uint64_t bytes) {
  return "out of heap: " + std::to_string(bytes) + " bytes asked (" +
         std::to_string(HeapAllocator::round_up(std::max<uint64_t>(bytes, 1))) + " with the 512-byte rounding); " +
         describe(h) + " has " + std::to_string(h.bytes - h.alloc.used()) + " bytes free in " +
         std::to_string(h.alloc.allocations()) + " allocations' gaps, the largest free range " +
         std::to_string(h.alloc.largest_free()) + " bytes: make the heap larger (every rank alike)";
}

// The heap holding [ptr, ptr + bytes) as the caller's pointer, or an error.
conccl_status offset_of(const conccl_heap& h, uint64_t ptr, uint64_t bytes, uint64_t* off) {
  if (ptr < h.base || ptr - h.base >= h.bytes)
    return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": pointer " + hex(ptr) +
                                                 " is outside " + describe(h) +
                                                 (h.cuda_device >= 0 ? " (pointers are CUDA pointers)"
                                                                     : " (pointers are engine addresses, va)"));
  *off = ptr - h.base;
  if (bytes > h.bytes - *off)
    return fail(CONCCL_ERR_OUT_OF_RANGE, std::string(current_call()) + ": " + std::to_string(bytes) +
                                             " bytes at offset " + std::to_string(*off) + " run past the end of " +
                                             describe(h));
  return CONCCL_OK;
}

// A torch entry point's failure: the thread's last error (already set by
// fail/report) copied where conccl_heap_torch_error finds it.
void keep_torch_error() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.torch_error = last_error();
}

}  // namespace

extern "C" {

conccl_status conccl_heap_create(conccl_comm_t ch, size_t bytes, conccl_heap_t* heap) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(heap, "heap is NULL");
    *heap = nullptr;
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return comm_destroyed();
    const int rank = c.comm->rank();
    CONCCL_C_REQUIRE(rank >= 0 && c.comm->bootstrap(),
                     "a heap is for one process per rank (conccl_comm_create_rank): with every rank in this process, "
                     "allocate each rank's buffers with conccl_buffer_alloc");
    CONCCL_C_REQUIRE(bytes > 0, "bytes must be > 0");
    const uint64_t usable = HeapAllocator::round_up(bytes);
    CONCCL_C_REQUIRE(usable != 0 && usable <= std::numeric_limits<size_t>::max() - 2 * HeapAllocator::kAlign,
                     "bytes " + std::to_string(bytes) + " is too large");
    const size_t total = static_cast<size_t>(usable + HeapAllocator::kAlign);
    conccl_device& d = *c.device;
    const int gpu = c.comm->gpu(rank);
    const bool cuda = nv::native(*d.dev) != nullptr;

    // This rank's memory first; then every rank learns every rank's size and
    // whether it got its memory, so that all go on to the window or none does.
    std::optional<conccl_buffer> rec;
    int ordinal = -1;
    Status st;
    if (cuda) {
      Result<int> o = nv::cuda_ordinal(*d.dev, gpu);
      if (!o.ok()) {
        st = o.status();
      } else {
        ordinal = *o;
        Result<nv::CudaAlloc> a = nv::cuda_alloc(total, ordinal);
        if (!a.ok()) {
          st = a.status();
        } else {
          Result<Buffer> r = nv::register_cuda(*d.dev, a->ptr, total, gpu);
          if (!r.ok()) {
            nv::CudaAlloc undo = *a;
            (void)nv::cuda_free(undo);
            st = r.status();
          } else {
            rec = record_buffer(d, *r, conccl_buffer_record::Origin::cuda_alloc, *a);
          }
        }
      }
    } else {
      Result<Buffer> r = d.dev->alloc(gpu, total, MemKind::device);
      if (!r.ok())
        st = r.status();
      else
        rec = record_buffer(d, *r, conccl_buffer_record::Origin::alloc);
    }
    auto h = std::make_shared<conccl_heap>();
    h->comm = c_ref.value();
    h->device = c.device;
    h->bytes = static_cast<size_t>(usable);
    h->cuda_device = ordinal;
    if (rec) {
      h->whole = *rec;
      if (cuda) {
        std::lock_guard<std::mutex> lock(d.buffers_mutex);
        h->base = d.buffers.at(rec->id).cuda.ptr;
      } else {
        h->base = rec->va;
      }
    }
    // On any failure from here: this rank's memory back.
    auto undo = [&](conccl_status s) {
      (void)free_memory(*h);
      return s;
    };
    const std::string mine = std::to_string(usable) + (st.ok() ? std::string() : " " + st.to_string());
    const Deadline dl = after(c.timeout_ms);
    Result<std::vector<Bootstrap::Message>> all = c.comm->bootstrap()->exchange("conccl_heap_create", mine, {}, dl);
    if (!all.ok()) return undo(report(all.status().prefix(current_call())));
    for (Bootstrap::Message& m : *all)
      for (int fd : m.fds) ::close(fd);
    if (!st.ok()) return undo(report(st.prefix(std::string(current_call()) + ": allocating this rank's heap")));
    for (size_t r = 0; r < all->size(); ++r) {
      const std::string& msg = (*all)[r].data;
      const size_t sp = msg.find(' ');
      const std::string size = msg.substr(0, sp);
      if (sp != std::string::npos)
        return undo(fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": rank " + std::to_string(r) +
                                                          " could not allocate its heap: " + msg.substr(sp + 1)));
      if (size != std::to_string(usable))
        return undo(fail(CONCCL_ERR_INVALID_ARGUMENT,
                         std::string(current_call()) + ": rank " + std::to_string(r) + " asks for a heap of " + size +
                             " bytes, rank " + std::to_string(rank) + " for " + std::to_string(usable) +
                             " (both rounded up to 512): every rank gives the same bytes, so that offsets match"));
    }
    Result<Buffer> whole = resolve_buffer(d, h->whole, std::string(current_call()) + ": the heap's buffer");
    if (!whole.ok()) return undo(report(whole.status()));
    Result<Window> w = c.comm->register_window(*whole);
    if (!w.ok()) return undo(report(w.status().prefix(current_call())));
    h->window = *w;
    h->alloc.reset(usable);
    const uint64_t bits = HeapTable::get().add(h);
    {
      Registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      reg.heaps.push_back(h);
    }
    *heap = handle_of<conccl_heap_t>(bits);
    return report(Status());
  });
}

conccl_status conccl_heap_destroy(conccl_heap_t hh) {
  return guard(__func__, [&] {
    if (!hh) return report(Status());
    CONCCL_C_FIND(HeapTable, h, hh, "heap");
    // While the communicator lives, the window goes first (collective; it
    // waits for the calls that use it). A failure leaves the heap as it was.
    std::shared_ptr<conccl_comm> c = h.comm.lock();
    if (c && c->comm && h.device->dev && h.window.valid()) {
      Status st = c->comm->deregister_window(h.window);
      if (!st.ok()) return report(st.prefix(current_call()));
      h.window = Window{};
    }
    (void)HeapTable::get().take(handle_bits(hh));
    {
      Registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      std::erase_if(reg.heaps, [&](const std::shared_ptr<conccl_heap>& x) { return x.get() == &h; });
      if (reg.current == handle_bits(hh)) reg.current = 0;
    }
    {
      std::lock_guard<std::mutex> lock(h.mu);
      h.alloc.reset(0);
    }
    return report(free_memory(h).prefix(std::string(current_call()) + ": freeing the heap's memory"));
  });
}

conccl_status conccl_heap_alloc(conccl_heap_t hh, size_t bytes, uint64_t* ptr) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(ptr, "ptr is NULL");
    *ptr = 0;
    CONCCL_C_FIND(HeapTable, h, hh, "heap");
    if (conccl_status s = check_alive(h); s != CONCCL_OK) return s;
    std::lock_guard<std::mutex> lock(h.mu);
    std::optional<uint64_t> off = h.alloc.allocate(bytes);
    if (!off) return fail(CONCCL_ERR_RESOURCE_EXHAUSTED, std::string(current_call()) + ": " + out_of_heap(h, bytes));
    *ptr = h.base + *off;
    return report(Status());
  });
}

conccl_status conccl_heap_free(conccl_heap_t hh, uint64_t ptr) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(HeapTable, h, hh, "heap");
    if (conccl_status s = check_alive(h); s != CONCCL_OK) return s;
    uint64_t off = 0;
    if (conccl_status s = offset_of(h, ptr, 0, &off); s != CONCCL_OK) return s;
    std::lock_guard<std::mutex> lock(h.mu);
    if (!h.alloc.release(off)) {
      std::optional<uint64_t> in = h.alloc.holder(off);
      return fail(CONCCL_ERR_INVALID_ARGUMENT,
                  std::string(current_call()) + ": " + hex(ptr) + " is not an allocation of the heap" +
                      (in ? " (it lies inside the one at " + hex(h.base + *in) + ": free that pointer)"
                          : " (never allocated, or freed already)"));
    }
    return report(Status());
  });
}

conccl_status conccl_heap_buffer(conccl_heap_t hh, uint64_t ptr, size_t bytes, conccl_buffer* out) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(out, "buffer is NULL");
    CONCCL_C_FIND(HeapTable, h, hh, "heap");
    if (conccl_status s = check_alive(h); s != CONCCL_OK) return s;
    CONCCL_C_REQUIRE(bytes > 0, "bytes must be > 0");
    uint64_t off = 0;
    if (conccl_status s = offset_of(h, ptr, bytes, &off); s != CONCCL_OK) return s;
    if (!buffer_live(*h.device, h.whole.id))
      return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the heap's memory was freed");
    conccl_buffer b = h.whole;
    b.va += off;
    if (b.host) b.host = static_cast<uint8_t*>(b.host) + off;
    b.size = bytes;
    *out = b;
    return report(Status());
  });
}

conccl_status conccl_heap_get_info(conccl_heap_t hh, conccl_heap_info* info) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(info, "info is NULL");
    CONCCL_C_FIND(HeapTable, h, hh, "heap");
    if (conccl_status s = check_alive(h); s != CONCCL_OK) return s;
    std::lock_guard<std::mutex> lock(h.mu);
    std::memset(info, 0, sizeof *info);
    info->base = h.base;
    info->bytes = h.bytes;
    info->used = h.alloc.used();
    info->largest_free = h.alloc.largest_free();
    info->allocations = h.alloc.allocations();
    info->cuda_device = h.cuda_device;
    info->buffer = h.whole;
    info->buffer.size = h.bytes;
    return report(Status());
  });
}

conccl_status conccl_heap_make_current(conccl_heap_t hh) {
  return guard(__func__, [&] {
    Registry& reg = registry();
    if (!hh) {
      std::lock_guard<std::mutex> lock(reg.mu);
      reg.current = 0;
      return report(Status());
    }
    CONCCL_C_FIND(HeapTable, h, hh, "heap");
    if (conccl_status s = check_alive(h); s != CONCCL_OK) return s;
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.current = handle_bits(hh);
    return report(Status());
  });
}

void* conccl_heap_torch_alloc(size_t size, int device, void* stream) {
  (void)stream;  // PyTorch's caching allocator above this orders reuse on streams
  void* out = nullptr;
  const conccl_status s = guard(__func__, [&]() -> conccl_status {
    uint64_t current = 0;
    {
      Registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      current = reg.current;
    }
    if (!current)
      return fail(CONCCL_ERR_INVALID_ARGUMENT,
                  std::string(current_call()) + ": no heap is current: call conccl_heap_make_current first " +
                      "(conccl.torch.SymmetricPool.mempool does)");
    Result<std::shared_ptr<conccl_heap>> found = HeapTable::get().find(current);
    if (!found.ok()) return report(found.status().prefix(std::string(current_call()) + ": the current heap"));
    conccl_heap& h = **found;
    if (conccl_status st = check_alive(h); st != CONCCL_OK) return st;
    if (h.cuda_device >= 0 && device != h.cuda_device)
      return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": PyTorch allocates on CUDA device " +
                                                   std::to_string(device) + "; the current heap is on CUDA device " +
                                                   std::to_string(h.cuda_device) +
                                                   ": use the pool's MemPool only on its device");
    std::lock_guard<std::mutex> lock(h.mu);
    std::optional<uint64_t> off = h.alloc.allocate(size);
    if (!off) return fail(CONCCL_ERR_RESOURCE_EXHAUSTED, std::string(current_call()) + ": " + out_of_heap(h, size));
    out = reinterpret_cast<void*>(static_cast<uintptr_t>(h.base + *off));
    return CONCCL_OK;  // the thread's last error is left as it was
  });
  if (s != CONCCL_OK) {
    out = nullptr;
    keep_torch_error();
  }
  return out;
}

void conccl_heap_torch_free(void* ptr, size_t size, int device, void* stream) {
  (void)device;
  (void)stream;
  if (!ptr) return;
  const conccl_status s = guard(__func__, [&]() -> conccl_status {
    const uint64_t p = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
    std::shared_ptr<conccl_heap> h;
    {
      Registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      for (const auto& x : reg.heaps)
        if (p >= x->base && p - x->base < x->bytes) h = x;
    }
    if (!h)
      return fail(CONCCL_ERR_INVALID_ARGUMENT,
                  std::string(current_call()) + ": " + hex(p) + " is in no live ConCCL heap (its heap was " +
                      "destroyed before PyTorch freed it, or the pointer is another allocator's): nothing freed");
    std::lock_guard<std::mutex> lock(h->mu);
    std::optional<HeapAllocator::Block> b = h->alloc.release(p - h->base);
    if (!b)
      return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": " + hex(p) +
                                                   " is not an allocation of " + describe(*h) +
                                                   " (freed already, or inside another): nothing freed");
    if (size != b->requested)
      return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": " + hex(p) + " was allocated with " +
                                                   std::to_string(b->requested) + " bytes and freed with " +
                                                   std::to_string(size) + " (freed all the same)");
    return CONCCL_OK;
  });
  if (s != CONCCL_OK) keep_torch_error();
}

conccl_status conccl_heap_torch_error(char* buf, size_t capacity, size_t* needed) {
  return guard(__func__, [&] {
    std::string s;
    {
      Registry& reg = registry();
      std::lock_guard<std::mutex> lock(reg.mu);
      s = reg.torch_error;
    }
    return copy_text(s, buf, capacity, needed);
  });
}

}  // extern "C"
