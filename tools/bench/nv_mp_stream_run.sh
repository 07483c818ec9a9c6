#!/bin/bash
# tools/bench/nv_mp_stream_run.sh - on the GPU machine (device tool, carry
# .nvdev): the NCCL-shaped calls with one process per rank ordered on CUDA
# streams. Builds in /tmp/nvb (Release, tests on), runs the forked stream
# test (tests/backends/nv/nv_mp_stream_test.cpp) and the C API tests, then
# examples/python/torch_allgather_procs.py for each "ranks:MiB:iters" in
# TORCH_RUNS; ASAN=1 also builds and runs the stream test with
# -DCONCCL_SANITIZE=address in /tmp/nva. Logs in $OUT; a summary last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared test_nv_mp_stream test_c_api test_nv_cuda
nv_build_time
summary=""
for t in backends/nv/test_nv_mp_stream backends/nv/test_nv_cuda c_api/test_c_api; do
  nv_run_test $t 300 30
done
nv_python_env
for run in ${TORCH_RUNS:-2:1:200 2:256:20 4:16:50 4:256:10}; do
  IFS=: read -r n mib iters <<< "$run"
  TORCH_WATCHDOG_S=150 timeout 170 python3 examples/python/torch_allgather_procs.py $n $mib $iters \
    > /tmp/torch_${n}x${mib}.log 2>&1; rc=$?; cat /tmp/torch_${n}x${mib}.log >> $OUT/torch.log
  line="torch $n ranks x $mib MiB: rc=$rc $(grep -E '^rank 0:' /tmp/torch_${n}x${mib}.log | cut -c1-160)"
  echo "$line"; summary+="$line"$'\n'
  [ $rc = 0 ] || tail -5 /tmp/torch_${n}x${mib}.log
done
if [ "${ASAN:-0}" = 1 ]; then
  t0=$(date +%s)
  cmake -S . -B /tmp/nva -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCONCCL_SANITIZE=address -DCMAKE_PREFIX_PATH=/tmp/gtest \
    -DGTEST_ROOT=/tmp/gtest > $OUT/cfg_asan.log 2>&1
  ninja -C /tmp/nva test_nv_mp_stream 2>&1 | grep -E "error|warning: " | head
  timeout 300 /tmp/nva/tests/backends/nv/test_nv_mp_stream > $OUT/asan_mp_stream.log 2>&1; rc=$?
  line="ASan test_nv_mp_stream: rc=$rc ($(( $(date +%s) - t0 )) s) $(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error' $OUT/asan_mp_stream.log) sanitizer reports"
  echo "$line"; summary+="$line"$'\n'
fi
echo "== summary"; printf "%s" "$summary"
