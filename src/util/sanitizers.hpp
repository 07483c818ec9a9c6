// src/util/sanitizers.hpp - which sanitizer this translation unit is built
// with (GCC defines __SANITIZE_*__, Clang answers __has_feature), for the
// few places that must behave differently under one: ThreadSanitizer keeps
// the 32..96 TiB process-slot windows for its own shadow memory, and the
// tests size their work to the sanitizers' slowdown.
#pragma once

namespace conccl::util {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace conccl::util
