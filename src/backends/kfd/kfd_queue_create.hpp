// src/backends/kfd/kfd_queue_create.hpp - creating one SDMA queue on a
// GPU of the open thunk (kfd_queue_create.cpp). Internal to the KFD backend;
// built only with libhsakmt.
#pragma once

#include <memory>

#include "backends/kfd/kfd_context.hpp"
#include "conccl/queue.hpp"

namespace conccl::kfd::detail {

// A queue on engine `engine` of `gpu` (checked by the caller, as are the ring
// size and pending faults), placed as the context's queue mode and pinning
// decide (plan_queue). Errors name the thunk call that failed.
Result<std::unique_ptr<Queue>> create_sdma_queue(const std::shared_ptr<Context>& ctx, int gpu, int engine,
                                                 const QueueOptions& opt);

}  // namespace conccl::kfd::detail
