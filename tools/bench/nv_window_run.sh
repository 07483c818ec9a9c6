#!/bin/bash
# tools/bench/nv_window_run.sh - on the GPU machine (device tool, carry
# .nvdev): one process per rank, calls on a CUDA stream back to back, the
# two paths side by side in one run (docs/perf/h200-collectives.md):
#   windows  tools/bench/nv_window_bench (Communicator::call, no message per call)
#   vote     examples/python/torch_allgather_procs.py (the NCCL-shaped C call
#            on tensors outside windows: one vote + one barrier per call)
#   one process, N loopback ranks: sdma-probe allgather --backend nv --ranks N
# then the same with CUDA MPS running. Also the stream tests on hardware.
#   PROCS="2 4 8"   MAX=256M   MPS=1 (0: skip the MPS pass)
# Logs in $OUT; the tables last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared sdma-probe nv_window_bench test_nv_mp_stream test_c_api
nv_build_time
summary=""
for t in backends/nv/test_nv_mp_stream c_api/test_c_api; do
  nv_run_test $t 200 20
done
nv_python_env
pass() {  # $1: tag
  local tag=$1
  for n in ${PROCS:-2 4 8}; do
    timeout 150 $B/tools/bench/nv_window_bench --procs $n --min 1K --max ${MAX:-256M} --iters 200 \
      --json $OUT/window_${tag}_${n}.json > $OUT/window_${tag}_${n}.txt 2> $OUT/window_${tag}_${n}.err
    echo "window $tag $n procs: rc=$?"; cat $OUT/window_${tag}_${n}.txt; head -c 600 $OUT/window_${tag}_${n}.err
  done
  for n in ${VOTE_PROCS:-2 3 4}; do
    TORCH_WATCHDOG_S=60 timeout 80 python3 examples/python/torch_allgather_procs.py $n 1 200 \
      > $OUT/vote_${tag}_${n}.log 2>&1
    echo "vote $tag $n procs 1 MiB: rc=$? $(grep -E '^rank 0:' $OUT/vote_${tag}_${n}.log | cut -c1-200)"
  done
}
pass plain
timeout 100 $B/tools/bench/nv_window_bench --procs 2 --min 1K --max 1M --iters 200 --host > $OUT/window_host_2.txt 2>&1
echo "window host-ordered 2 procs: rc=$?"; cat $OUT/window_host_2.txt
for n in ${PROCS:-2 4 8}; do
  timeout 150 $B/tools/sdma-probe/sdma-probe allgather --backend nv --ranks $n --min 1K --max ${MAX:-256M} \
    --json $OUT/oneproc_$n.json > $OUT/oneproc_$n.txt 2>&1
  echo "one process, $n loopback ranks: rc=$?"; grep -vE '^\s*$' $OUT/oneproc_$n.txt | head -30
done
if [ "${MPS:-1}" = 1 ]; then
  nv_mps_on
  PROCS="${MPS_PROCS:-2 4}" VOTE_PROCS="4" pass mps
  nv_mps_off
fi
echo "== summary"; echo "$summary"
