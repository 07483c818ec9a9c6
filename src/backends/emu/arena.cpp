// src/backends/emu/arena.cpp
#include "backends/emu/arena.hpp"
#include "util/free_ranges.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace conccl::emu {

namespace {
constexpr uint64_t kPage = 4096;
}  // namespace

Arena::Arena(std::string name, uint64_t va_base, size_t size, int fd, uint8_t* host, std::string full_hint)
    : name_(std::move(name)), full_hint_(std::move(full_hint)), va_base_(va_base), size_(size), fd_(fd), host_(host) {
  free_[0] = size;
}

Arena::~Arena() {
  munmap(host_, size_);
  close(fd_);
}

Result<std::unique_ptr<Arena>> Arena::create(std::string name, uint64_t va_base, size_t size,
                                             std::string full_hint) {
  if (size == 0 || size % kPage)
    return error(Code::invalid_argument, "arena " + name + ": size must be a non-zero multiple of 4 KiB");
  const int fd = memfd_create(("conccl-" + name).c_str(), MFD_CLOEXEC);
  if (fd < 0)
    return error(Code::resource_exhausted, "memfd_create for arena " + name + " failed: " + strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int e = errno;
    close(fd);
    return error(Code::resource_exhausted, "ftruncate arena " + name + " to " + std::to_string(size) +
                                               " bytes failed: " + strerror(e));
  }
  // Pages are allocated on first touch, so a large arena costs nothing until used.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return error(Code::resource_exhausted, "mmap arena " + name + " failed: " + strerror(e));
  }
  return std::unique_ptr<Arena>(
      new Arena(std::move(name), va_base, size, fd, static_cast<uint8_t*>(p), std::move(full_hint)));
}

Result<std::unique_ptr<Arena>> Arena::map(std::string name, uint64_t va_base, size_t size, int fd) {
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size) {
    close(fd);
    return error(Code::invalid_argument, "arena " + name + ": the shared file is smaller than the " +
                                             std::to_string(size) + " bytes announced");
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return error(Code::resource_exhausted, "mmap of shared arena " + name + " failed: " + strerror(e));
  }
  auto a = std::unique_ptr<Arena>(new Arena(std::move(name), va_base, size, fd, static_cast<uint8_t*>(p), ""));
  a->free_.clear();  // another process allocates from it
  return a;
}

Result<uint64_t> Arena::allocate(size_t bytes, size_t align) {
  if (bytes == 0) return error(Code::invalid_argument, "allocation of 0 bytes");
  if (align < 256 || (align & (align - 1)))
    return error(Code::invalid_argument, "alignment must be a power of two >= 256");
  // Larger than the whole arena: refused before the rounding below, which
  // would wrap near 2^64 to a 0-byte block.
  if (bytes > size_)
    return error(Code::resource_exhausted, "allocation of " + std::to_string(bytes) + " bytes is larger than the emulated memory " +
                                               name_ + " (" + std::to_string(size_) + " bytes); " + full_hint_);
  const uint64_t len = (bytes + 255) & ~uint64_t(255);
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<uint64_t> start = util::take_first_fit(free_, len, align)) {
    used_[*start] = len;
    return va_base_ + *start;
  }
  size_t in_use = 0;
  for (const auto& [off, n] : used_) in_use += n;
  return error(Code::resource_exhausted,
               "emulated memory " + name_ + " is out of space for " + std::to_string(bytes) + " bytes (" +
                   std::to_string(in_use) + " of " + std::to_string(size_) +
                   " bytes in use); " + full_hint_);
}

namespace {

// Zeroes [p, p + len), 8-byte aligned, len a multiple of 8 (allocations are
// 256-byte blocks), a word at a time with atomic stores. Engines store into
// this memory atomically, a 64-bit signal as two 32-bit FENCEs for one, and
// the host waited for such a value with a 64-bit load; ThreadSanitizer does
// not relate a 32-bit store to a 64-bit load, so a plain memset of a freed
// signal read as a race with a store the host had in fact waited for.
void zero_words(uint8_t* p, uint64_t len) {
  for (uint64_t i = 0; i < len; i += 8)
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p + i)).store(0, std::memory_order_relaxed);
}

}  // namespace

Status Arena::release(uint64_t va) {
  if (va < va_base_) return error(Code::not_found, "address " + hex(va) + " is not in " + name_);
  const uint64_t off = va - va_base_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = used_.find(off);
  if (it == used_.end())
    return error(Code::not_found, "address " + hex(va) + " was not allocated from " + name_ +
                                      " (double free, or not the start of a buffer)");
  const uint64_t len = it->second;
  used_.erase(it);
  // Drop the pages so the next user sees zeros and the memory goes back.
  const uint64_t page_lo = (off + kPage - 1) & ~(kPage - 1), page_hi = (off + len) & ~(kPage - 1);
  if (page_hi > page_lo) {
    zero_words(host_ + off, page_lo - off);
    madvise(host_ + page_lo, page_hi - page_lo, MADV_REMOVE);
    zero_words(host_ + page_hi, off + len - page_hi);
  } else {
    zero_words(host_ + off, len);
  }
  util::give_back(free_, off, len);
  return Status();
}

size_t Arena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [off, len] : used_) n += len;
  return n;
}

}  // namespace conccl::emu
