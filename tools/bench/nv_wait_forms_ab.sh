#!/bin/bash
# tools/bench/nv_wait_forms_ab.sh - on the GPU machine (device tool, carry .nvdev):
# the copy engine's own adds and how lists wait, in one lease (issues #28, #25, #29).
#   1. test_nv_backend's NvHw.CopyEngine* tests: the LAUNCH_DMA semaphore
#      reduction carries, sums adds from every engine, and lands after the data.
#   2. Captured replays against uncaptured calls (nv_window_bench --graph, 2
#      processes): the default (replays armed once their tick is seen); armed
#      ahead (CONCCL_REPLAY_ARM=ahead), alone, with the trigger / "posted"
#      waits keeping their channel resident (CONCCL_HOLD_TRIGGERS=1), and with
#      every wait so (CONCCL_NV_ACQUIRE_SWITCH_TSG=0); the default with held
#      waits, folded arrivals and CE adds.
#   3. nv_small_ab.sh's forms now / fold / hold (one process and process per rank).
# GRAPH_MAX (16K), FORMS ("now fold hold"), RANKS ("2 8"), PROCS ("2 4"), MAX (16K).
# QUICK=1: only the tests and step 2, at 1-2 KiB (a lease with little time left).
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
nv_configure_tests $OUT/cfg.log
if [ -n "${QUICK:-}" ]; then nv_build test_nv_backend nv_window_bench; GRAPH_MAX=2K; else nv_build test_nv_backend sdma-probe nv_window_bench; fi
timeout 60 $B/tests/backends/nv/test_nv_backend --gtest_filter='NvHw.CopyEngine*' > $OUT/ce_add.log 2>&1
echo "NvHw.CopyEngine*: rc=$?"; grep -E "^\[  (OK|FAILED|PASSED) |Failure|saw the" $OUT/ce_add.log | head
W=$B/tools/bench/nv_window_bench
i=0
for form in "x=1" "CONCCL_REPLAY_ARM=ahead" "CONCCL_REPLAY_ARM=ahead CONCCL_HOLD_TRIGGERS=1" \
            "CONCCL_REPLAY_ARM=ahead CONCCL_NV_ACQUIRE_SWITCH_TSG=0" \
            "CONCCL_HOLD_TRIGGERS=1 CONCCL_FOLD_ARRIVALS=1 CONCCL_NV_CE_ADD=1"; do
  i=$((i + 1))
  env $form timeout 60 $W --procs 2 --graph --min 1K --max ${GRAPH_MAX:-16K} --iters ${ITERS:-300} \
    --json $OUT/graph_$i.json > $OUT/graph_$i.log 2>&1
  echo "graph [$form] rc=$?"; grep -E "^ +[0-9]+ " $OUT/graph_$i.log | head -3
done
[ -n "${QUICK:-}" ] && exit 0
FORMS="${FORMS:-now fold hold}" REPS=1 RANKS="${RANKS:-2 8}" PROCS="${PROCS:-2 4}" MAX=${MAX:-16K} \
  timeout 200 bash "$(dirname "$0")/nv_small_ab.sh" > $OUT/small_ab.txt 2>&1
echo "nv_small_ab.sh rc=$?"; tail -25 $OUT/small_ab.txt
