// src/util/thread_name.hpp - the library's own threads, named, so that top -H,
// gdb's "info threads" and /proc/<pid>/task/*/comm say which is which
// ("conccl-keeper", "conccl-emu-0.3", ...) in a program that has many.
#pragma once

#include <pthread.h>

#include <string>
#include <thread>
#include <utility>

namespace conccl::util {

// Linux keeps at most 15 characters of a thread's name; longer ones are cut.
inline void name_this_thread(std::string name) {
  if (name.size() > 15) name.resize(15);
  (void)pthread_setname_np(pthread_self(), name.c_str());
}

// A thread that names itself `name`, then runs fn().
template <typename Fn>
std::thread named_thread(std::string name, Fn fn) {
  return std::thread([name = std::move(name), fn = std::move(fn)]() mutable {
    name_this_thread(std::move(name));
    fn();
  });
}

}  // namespace conccl::util
