// packets/hopper_ce.hpp - NVIDIA Hopper copy-engine pushbuffers ("hopper-ce").
//
// One include for the whole Hopper packet layer, split by job as the SDMA side is:
//   hopper_layout.hpp (+ hopper_layout_table.cpp)  class ids, the method header,
//       the method table (host and copy methods, fields, value names) and the
//       codec for one data dword; the limits of the class (kMaxCopyBytes, ...)
//   hopper_emit.hpp (+ hopper_emit.cpp)  GPFIFO entries, LAUNCH_DMA and
//       SEM_EXECUTE bits, and the emitters (put_*) the vocabulary lowers to
//   hopper_asm.hpp (+ hopper_asm.cpp)    the text form: assemble, disassemble,
//       describe_methods (sdma-probe asm/dis --gen hopper-ce)
#pragma once

#include "conccl/packets/hopper_asm.hpp"
#include "conccl/packets/hopper_emit.hpp"
#include "conccl/packets/hopper_layout.hpp"
