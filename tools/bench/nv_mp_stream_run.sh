#!/bin/bash
# tools/bench/nv_mp_stream_run.sh - on the GPU machine (device tool, carry
# .nvdev): the NCCL-shaped calls with one process per rank ordered on CUDA
# streams. Builds in /tmp/nvb (Release, tests on), runs the forked stream
# test (tests/backends/nv/nv_mp_stream_test.cpp) and the C API tests, then
# examples/python/torch_allgather_procs.py for each "ranks:MiB:iters" in
# TORCH_RUNS; ASAN=1 also builds and runs the stream test with
# -DCONCCL_SANITIZE=address in /tmp/nva. Logs in $OUT; a summary last.
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb
if [ ! -f /tmp/gtest/lib/libgtest.a ]; then
  cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install > /tmp/gt.log 2>&1
fi
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest \
  > $OUT/cfg.log 2>&1
ninja -C $B conccl_shared test_nv_mp_stream test_c_api test_nv_cuda 2>&1 | grep -E "error|warning: " | head
echo "build: $(( $(date +%s) - t0 )) s"
summary=""
for t in backends/nv/test_nv_mp_stream backends/nv/test_nv_cuda c_api/test_c_api; do
  timeout 300 $B/tests/$t > $OUT/$(basename $t).log 2>&1; rc=$?
  line="$(basename $t): rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/$(basename $t).log | tr '\n' ' ')"
  echo "$line"; summary+="$line"$'\n'
  grep -B2 -A6 "Failure" $OUT/$(basename $t).log | head -30
done
export PYTHONPATH=python CONCCL_LIBRARY=$(find $B -name "libconccl.so" | head -1)
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
