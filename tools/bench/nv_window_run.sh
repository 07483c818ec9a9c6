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
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb
if [ ! -f /tmp/gtest/lib/libgtest.a ]; then
  cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install > /tmp/gt.log 2>&1
fi
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest \
  > $OUT/cfg.log 2>&1
ninja -C $B conccl_shared sdma-probe nv_window_bench test_nv_mp_stream test_c_api 2>&1 | grep -E "error|warning: " | head
echo "build: $(( $(date +%s) - t0 )) s"
summary=""
for t in backends/nv/test_nv_mp_stream c_api/test_c_api; do
  timeout 200 $B/tests/$t > $OUT/$(basename $t).log 2>&1; rc=$?
  line="$(basename $t): rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/$(basename $t).log | tr '\n' ' ')"
  echo "$line"; summary+="$line"$'\n'
  grep -B2 -A6 "Failure" $OUT/$(basename $t).log | head -20
done
export PYTHONPATH=python CONCCL_LIBRARY=$(find $B -name "libconccl.so" | head -1)
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
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && echo "MPS on"
  PROCS="${MPS_PROCS:-2 4}" VOTE_PROCS="4" pass mps
  echo quit | nvidia-cuda-mps-control; echo "MPS off"
fi
echo "== summary"; echo "$summary"
