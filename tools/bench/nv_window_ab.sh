#!/bin/bash
# tools/bench/nv_window_ab.sh - on the GPU machine (device tool, carry
# .nvdev), issue #25's A/B in one lease: the vote path (PyTorch,
# examples/python/torch_allgather_procs.py, 1 MiB) with and without
# ACQUIRE_SWITCH_TSG (CONCCL_NV_ACQUIRE_SWITCH_TSG=0), and the window path
# (tools/bench/nv_window_bench) stream-ordered for 2/4/8 processes, host-
# ordered for 2, without the bit for 2, and under CUDA MPS for 2 and 4.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_tests /tmp/cfg.log
nv_build conccl_shared sdma-probe nv_window_bench ${EXTRA_TARGETS:-}
nv_python_env
W=$B/tools/bench/nv_window_bench
for n in ${VOTE_PROCS:-2 3 4}; do
  for tsg in 1 0; do
    CONCCL_NV_ACQUIRE_SWITCH_TSG=$tsg TORCH_WATCHDOG_S=60 timeout 80 python3 examples/python/torch_allgather_procs.py $n 1 200 > /tmp/v.log 2>&1
    echo "vote $n procs 1 MiB switch_tsg=$tsg: rc=$? $(grep -E '^rank 0:' /tmp/v.log | cut -c1-160)"
  done
done
for n in ${PROCS:-2 4 8}; do
  echo "== window stream $n procs"; timeout 120 $W --procs $n --min 1K --max ${MAX:-256M} --json $OUT/window_$n.json 2>&1 | tail -20
done
echo "== window host-ordered 2 procs"; timeout 60 $W --procs 2 --min 1K --max 1M --host 2>&1 | tail -12
echo "== window stream 2 procs, CONCCL_NV_ACQUIRE_SWITCH_TSG=0"
CONCCL_NV_ACQUIRE_SWITCH_TSG=0 timeout 60 $W --procs 2 --min 1K --max 1M 2>&1 | tail -12
if [ "${MPS:-1}" = 1 ]; then
  nv_mps_on
  for n in 2 4; do echo "== window stream $n procs, MPS"; timeout 90 $W --procs $n --min 1K --max ${MAX:-256M} 2>&1 | tail -20; done
  nv_mps_off
fi
