#!/bin/bash
# tools/bench/nv_device_run.sh - build and run the nv backend's tests and
# benchmarks on a GPU machine in one go (used through the device tool; see
# docs/perf/h200.md). Builds only the nv targets (and conccl for the adapter
# test). Logs go to $OUT (at most 8 files: run.log, configure.log, clocks.csv,
# bench_stderr.log, cuda_stderr.log, nv_ce_bench.json, interop.json, c3.json);
# a short summary is printed last.
#   FAULT=1    also run the MMU-fault test (provokes an Xid 31 on our channel)
#   BENCH_ARGS="--size-mib 1024 --iters 10 --lat-iters 2000 --explore"
#   INTEROP=1  also build and run nv_interop_bench (needs the CUDA toolkit there)
#   C3=1       also build and run nv_c3_bench (needs CUDA and cuBLAS there)
#   C3_ARGS="--gemms 600 --reps 3"
#   C3_ARGS2="--gemm-data zeros --variants ce3,sm"  a second C3 run (c3b.json;
#              leave INTEROP off then: the device tool returns at most 8 files)
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}
mkdir -p "$OUT"
B=/tmp/nvb
S=/tmp/nv_summary
rm -rf $S; mkdir -p $S  # no summaries left from an earlier run on a warm machine
{
  echo "== machine"
  uname -r; head -1 /proc/driver/nvidia/version; cat /sys/module/nvidia/taint 2>/dev/null
  nvidia-smi -L 2>&1 | head -4; ls -l /dev/nvidia* 2>&1 | head -8
  nvidia-smi --query-gpu=power.limit,clocks.max.sm,temperature.gpu --format=csv 2>&1 | tail -1
  g++ --version | head -1; cmake --version | head -1; nproc
  if [ -d .nvdev/googletest ] && [ ! -f /tmp/gtest/lib/libgtest.a ]; then
    echo "== googletest (carried)"
    cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install >> /tmp/gt.log 2>&1 \
      || { echo "googletest build failed"; tail -20 /tmp/gt.log; }
  fi
  echo "== configure + build"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest \
    -DCONCCL_BUILD_BENCHMARKS=ON > $OUT/configure.log 2>&1 || { echo "configure failed"; tail -30 $OUT/configure.log; }
  T="test_nv_packets test_nv_backend test_nv_cuda test_nv_adapter test_nv_local_capture nv_ce_bench"
  [ "${INTEROP:-0}" = 1 ] && T="$T nv_interop_bench"
  [ "${C3:-0}" = 1 ] && T="$T nv_c3_bench"
  t0=$(date +%s)
  ninja -C $B $T 2>&1 | grep -E "error|warning|FAILED" | head -40
  echo "build: $(( $(date +%s) - t0 )) s"
  nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 250 \
    > $OUT/clocks.csv 2>&1 &
  SMI=$!
  echo "== test_nv_packets"
  timeout 60 $B/tests/backends/nv/test_nv_packets --gtest_brief=1 2>&1 | tail -3
  echo "== test_nv_backend"
  timeout 180 $B/tests/backends/nv/test_nv_backend --gtest_filter=-NvFault.* --gtest_brief=1 2>&1 | tail -12
  echo "== test_nv_adapter"
  timeout 120 $B/tests/backends/nv/test_nv_adapter 2>&1 | grep -vE "^\[ +(RUN|OK) " | tail -14
  echo "== test_nv_cuda"
  timeout 120 $B/tests/backends/nv/test_nv_cuda 2>&1 | grep -vE "^\[ +(RUN|OK) " | tail -12
  echo "== test_nv_local_capture (every rank in one process, captured into a CUDA graph)"
  timeout 150 $B/tests/backends/nv/test_nv_local_capture 2>&1 | grep -vE "^\[ +(RUN|OK) " | tail -8
  echo "== nv_ce_bench"
  timeout 300 $B/tools/bench/nv_ce_bench --verbose --json $OUT/nv_ce_bench.json ${BENCH_ARGS:-} \
    2> $OUT/bench_stderr.log | tee $S/ce.txt
  echo "bench rc=${PIPESTATUS[0]}"
  grep -vE "^\[nv\] (rm_alloc|rm_control|rm_free|rm_map|UVM_)" $OUT/bench_stderr.log | tail -12
  if [ "${INTEROP:-0}" = 1 ]; then
    echo "== nv_interop_bench"
    timeout 120 $B/tools/bench/nv_interop_bench --json $OUT/interop.json ${INTEROP_ARGS:-} \
      2>> $OUT/cuda_stderr.log | tee $S/interop.txt
    echo "interop rc=${PIPESTATUS[0]}"
  fi
  if [ "${C3:-0}" = 1 ]; then
    echo "== nv_c3_bench"
    timeout 300 $B/tools/bench/nv_c3_bench --json $OUT/c3.json ${C3_ARGS:-} 2>> $OUT/cuda_stderr.log | tee $S/c3.txt
    echo "c3 rc=${PIPESTATUS[0]}"
    if [ -n "${C3_ARGS2:-}" ]; then
      echo "== nv_c3_bench (second run)"
      timeout 300 $B/tools/bench/nv_c3_bench --json $OUT/c3b.json ${C3_ARGS2} 2>> $OUT/cuda_stderr.log | tee $S/c3b.txt
      echo "c3b rc=${PIPESTATUS[0]}"
    fi
  fi
  tail -8 $OUT/cuda_stderr.log 2>/dev/null
  if [ "${FAULT:-0}" = 1 ]; then
    echo "== fault test"
    CONCCL_NV_FAULT_TEST=1 timeout 60 $B/tests/backends/nv/test_nv_backend --gtest_filter=NvFault.* 2>&1 | tail -8
  fi
  kill $SMI 2>/dev/null
  echo "== clocks (pstate, sm MHz, mem MHz) seen"; cut -d, -f2-4 $OUT/clocks.csv | sort | uniq -c | sort -rn | head -6
  echo "== dmesg"
  dmesg 2>/dev/null | grep -iE "nvrm|xid" | tail -10
  echo "== summary"
  for f in ce interop c3 c3b; do [ -f $S/$f.txt ] && grep -v "^$" $S/$f.txt; done; true
} 2>&1 | tee $OUT/run.log
