#!/bin/bash
# tools/bench/nv_c3_run.sh - on a GPU machine (through the device tool; see
# docs/perf/h200.md "How to run"): build the two C3 benchmarks and run them
# back to back, so that the all-gather through the one command layer
# (nv_coll_bench) and plain copies on the engines (nv_c3_bench) are measured
# by the same protocol on the same GPU in one session. Logs in $OUT
# (run.log, coll*.json/log, c3*.json/log); the tables last.
#   COLL_ARGS="..."   nv_coll_bench arguments (--only c3 is added); COLL_ARGS2 a second run
#   C3_ARGS="..."     nv_c3_bench arguments (C3_ARGS=skip: not run)
#   TORCH="4 64"      also tools/bench/nv_c3_factors.py with these arguments (the
#                     PyTorch C3; its SOAK_MS, REPS, BRACKET, MM, CONFIGS pass through)
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
{
  nv_machine
  nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader 2>&1 | head -2
  echo "== configure + build"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_BUILD_TESTS=OFF > $OUT/configure.log 2>&1 \
    || { echo "configure failed"; tail -30 $OUT/configure.log; }
  t0=$(date +%s)
  ninja -C $B nv_coll_bench nv_c3_bench ${TORCH:+conccl_shared} 2>&1 | grep -E "error|warning: |FAILED" | head -40
  echo "build: $(( $(date +%s) - t0 )) s"
  run_coll() {  # name args...
    local name=$1; shift
    echo "== nv_coll_bench --only c3 $*"
    timeout ${COLL_TIMEOUT:-500} $B/tools/bench/nv_coll_bench --only c3 --json $OUT/$name.json "$@" > $OUT/$name.log 2>&1
    echo "$name rc=$?"
    grep -vE "^c3 " $OUT/$name.log | tail -14
  }
  [ -n "${COLL_ARGS:-}" ] && run_coll coll $COLL_ARGS
  [ -n "${COLL_ARGS2:-}" ] && run_coll coll2 $COLL_ARGS2
  if [ "${C3_ARGS:-skip}" != skip ]; then
    echo "== nv_c3_bench $C3_ARGS"
    timeout ${C3_TIMEOUT:-400} $B/tools/bench/nv_c3_bench --json $OUT/c3.json $C3_ARGS > $OUT/c3.log 2>&1
    echo "c3 rc=$?"
    tail -12 $OUT/c3.log
  fi
  if [ -n "${TORCH:-}" ]; then
    echo "== tools/bench/nv_c3_factors.py $TORCH (SOAK_MS=${SOAK_MS:-0} REPS=${REPS:-1} BRACKET=${BRACKET:-0} MM=${MM:-300})"
    CONCCL_LIBRARY=$(ls $B/src/libconccl.so.0) PYTHONPATH=python TORCH_WATCHDOG_S=380 timeout 400 \
      python3 tools/bench/nv_c3_factors.py $TORCH $OUT/torch_c3.json > $OUT/torch_c3.log 2>&1
    echo "torch rc=$?"; tail -8 $OUT/torch_c3.log
  fi
  echo "== dmesg"
  dmesg 2>/dev/null | grep -iE "nvrm|xid" | tail -6
} 2>&1 | tee $OUT/run.log
