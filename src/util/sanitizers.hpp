// src/util/sanitizers.hpp - which sanitizer this translation unit is built
// with (GCC defines __SANITIZE_*__, Clang answers __has_feature), for the
// few places that must behave differently under one: ThreadSanitizer keeps
// the 32..96 TiB process-slot windows for its own shadow memory, and the
// tests size their work to the sanitizers' slowdown.
#pragma once

// __has_feature where the compiler has it (Clang), else never.
#if defined(__has_feature)
#define CONCCL_HAS_FEATURE(x) __has_feature(x)
#else
#define CONCCL_HAS_FEATURE(x) 0
#endif

namespace conccl::util {

#if defined(__SANITIZE_THREAD__) || CONCCL_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || CONCCL_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace conccl::util
