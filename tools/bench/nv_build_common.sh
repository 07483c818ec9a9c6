#!/bin/bash
# tools/bench/nv_build_common.sh - sourced (not run) by the tools/bench/nv_*.sh
# scripts on the GPU machine, from the repository's root: what each of them
# used to repeat before its own runs. Sets OUT (default /tmp/nv_out, made)
# and B (/tmp/nvb, the Release build) and defines:
#   nv_machine                 "== machine", the kernel and the driver version
#   nv_configure_tests LOG     googletest from .nvdev (carried by the device
#                              tool) into /tmp/gtest once per machine, then
#                              configure $B with the tests into LOG; t0 = the
#                              configure's start
#   nv_configure_lib LOG       t0 = now; configure $B without the tests into LOG
#   nv_build TARGET...         ninja in $B, only its errors and warnings shown
#   nv_build_time              "build: N s" since t0
#   nv_run_test T SECS LINES   tests/T of $B with a timeout into $OUT/<name>.log;
#                              prints and adds to $summary its PASSED/FAILED/
#                              SKIPPED lines, then up to LINES lines of failures
#   nv_python_env [DIR]        PYTHONPATH=DIR (default python) and
#                              CONCCL_LIBRARY=$B's libconccl.so, exported
#   nv_mps_on / nv_mps_off     start / stop the CUDA MPS daemon (/tmp/mps_*)
#   nv_python_lib LOG          the GPU's name, then the library alone configured
#                              (into LOG), built and timed, and nv_python_env:
#                              what a run of the Python tools needs first
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb

nv_machine() {
  echo "== machine"
  uname -r; head -1 /proc/driver/nvidia/version
}

nv_configure_tests() {
  if [ ! -f /tmp/gtest/lib/libgtest.a ]; then
    cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install > /tmp/gt.log 2>&1
  fi
  t0=$(date +%s)
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest > "$1" 2>&1
}

nv_configure_lib() {
  t0=$(date +%s)
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_BUILD_TESTS=OFF > "$1" 2>&1
}

nv_build() { ninja -C $B "$@" 2>&1 | grep -E "error|warning: " | head; }

nv_build_time() { echo "build: $(( $(date +%s) - t0 )) s"; }

nv_run_test() {  # T SECS LINES
  local t=$1 log=$OUT/$(basename $1).log rc line
  timeout $2 $B/tests/$t > $log 2>&1; rc=$?
  line="$(basename $t): rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $log | tr '\n' ' ')"
  echo "$line"; summary+="$line"$'\n'
  grep -B2 -A6 "Failure" $log | head -$3
}

nv_python_env() {
  export PYTHONPATH=${1:-python} CONCCL_LIBRARY=$(find $B -name "libconccl.so" | head -1)
}

nv_python_lib() {
  nvidia-smi --query-gpu=name --format=csv,noheader
  nv_configure_lib "$1"
  nv_build conccl_shared
  nv_build_time
  nv_python_env
}

nv_mps_on() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && echo "MPS on"
}

nv_mps_off() { echo quit | nvidia-cuda-mps-control; echo "MPS off"; }
