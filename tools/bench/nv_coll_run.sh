#!/bin/bash
# tools/bench/nv_coll_run.sh - on a GPU machine (through the device tool; see
# docs/perf/h200.md "How to run"): build, run the nv hardware tests, then the
# collectives on the copy engines through the one command layer:
# sdma-probe sweeps with loopback ranks and nv_coll_bench (C3 with an
# all-gather, plan -> CUDA kernel latency, host cost per copy). Logs in $OUT
# (run.log, sweeps.jsonl, coll.json, tests.log, configure.log); a summary last.
#   SWEEP_RANKS="2 4 8"   rank counts for the sweeps
#   SWEEP_MAX=64M         largest size of the sweeps
#   SWEEP_FLAGS=""        extra sdma-probe flags for every sweep (e.g. --queues per-rank)
#   SWEEP_OPS="allgather:pcpy,b2b,auto alltoall:pcpy,b2b broadcast:fanout,chain gather:pcpy scatter:fanout p2p:striped,single"
#   COLL_ARGS="--ranks 4"   nv_coll_bench arguments (COLL=0 skips it)
#   COLL_ARGS2="..."        a second nv_coll_bench run (coll2.json), e.g. --gemm-data zeros
#   SAN=address|thread    instead: a sanitizer build of everything and ctest
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
{
  nv_machine
  nvidia-smi -L 2>&1 | head -2
  nproc
  if [ -d .nvdev/googletest ] && [ ! -f /tmp/gtest/lib/libgtest.a ]; then
    cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install >> /tmp/gt.log 2>&1 \
      || { echo "googletest build failed"; tail -20 /tmp/gt.log; }
  fi
  if [ -n "${SAN:-}" ]; then
    for san in $SAN; do
      echo "== sanitizer build ($san) and ctest"
      S=/tmp/nvsan_$san
      t0=$(date +%s)
      cmake -S . -B $S -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONCCL_SANITIZE=$san -DCMAKE_PREFIX_PATH=/tmp/gtest \
        -DGTEST_ROOT=/tmp/gtest -DCONCCL_BUILD_BENCHMARKS=OFF > $OUT/configure_$san.log 2>&1 || tail -20 $OUT/configure_$san.log
      ninja -C $S 2>&1 | grep -E "error:|warning: " | head -20
      echo "build: $(( $(date +%s) - t0 )) s"
      ( cd $S && ctest -j 8 --timeout 300 --output-on-failure > $OUT/ctest_$san.log 2>&1 )
      grep -E "tests passed|tests failed|\(Failed\)|Timeout|Total Test" $OUT/ctest_$san.log | head -20
      echo "sanitizer reports: $(grep -cE "ERROR: AddressSanitizer|runtime error|WARNING: ThreadSanitizer" $OUT/ctest_$san.log)"
    done
    exit 0
  fi
  echo "== configure + build"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest \
    > $OUT/configure.log 2>&1 || { echo "configure failed"; tail -30 $OUT/configure.log; }
  t0=$(date +%s)
  ninja -C $B test_nv_packets test_nv_backend test_nv_adapter test_nv_cuda sdma-probe nv_coll_bench 2>&1 \
    | grep -E "error|warning: |FAILED" | head -40
  echo "build: $(( $(date +%s) - t0 )) s"
  if [ "${TESTS:-1}" = 1 ]; then
    echo "== nv tests"
    for t in test_nv_packets test_nv_backend test_nv_adapter test_nv_cuda; do
      timeout 240 $B/tests/backends/nv/$t --gtest_filter=-NvFault.* > $OUT/tests_$t.log 2>&1
      echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_$t.log | tr '\n' ' ')"
      grep -E "^\[  FAILED  \]|Failure" $OUT/tests_$t.log | head -6
    done
    cat $OUT/tests_*.log > $OUT/tests.log; rm -f $OUT/tests_*.log
  fi
  echo "== sdma-probe list --backend nv"
  $B/tools/sdma-probe/sdma-probe list --backend nv 2>&1 | head -12
  echo "== sweeps (sdma-probe <op> --backend nv --ranks N)"
  : > $OUT/sweeps.jsonl
  for N in ${SWEEP_RANKS:-2 4 8}; do
    for spec in ${SWEEP_OPS:-allgather:pcpy,b2b,auto alltoall:pcpy,b2b,auto broadcast:fanout,chain,auto gather:pcpy scatter:fanout p2p:striped,single}; do
      op=${spec%%:*}
      for v in $(echo ${spec#*:} | tr ',' ' '); do
        t0=$(date +%s%N)
        timeout 300 $B/tools/sdma-probe/sdma-probe $op --backend nv --ranks $N --variant $v --min ${SWEEP_MIN:-1K} \
          --max ${SWEEP_MAX:-64M} ${SWEEP_FLAGS:-} --timeout-ms 60000 --json /tmp/sw.json > /tmp/sw.txt 2> /tmp/sw.err
        rc=$?
        [ -f /tmp/sw.json ] && { tr -d '\n' < /tmp/sw.json | sed "s/^{/{\"variant_asked\": \"$v\", \"flags\": \"${SWEEP_FLAGS:-}\", /"; echo; } >> $OUT/sweeps.jsonl
        rm -f /tmp/sw.json
        last=$(tail -1 /tmp/sw.txt)
        printf "%-10s %-8s N=%d rc=%d %6d ms  last: %s\n" $op $v $N $rc $(( ($(date +%s%N) - t0) / 1000000 )) "$last"
        [ $rc -ne 0 ] && head -c 600 /tmp/sw.err
      done
    done
  done
  if [ "${COLL:-1}" = 1 ]; then
    echo "== nv_coll_bench ${COLL_ARGS:-}"
    timeout ${COLL_TIMEOUT:-400} $B/tools/bench/nv_coll_bench --json $OUT/coll.json ${COLL_ARGS:-} 2> $OUT/coll_stderr.log
    echo "coll rc=$?"
    tail -6 $OUT/coll_stderr.log
    if [ -n "${COLL_ARGS2:-}" ]; then
      echo "== nv_coll_bench $COLL_ARGS2"
      timeout ${COLL_TIMEOUT:-400} $B/tools/bench/nv_coll_bench --json $OUT/coll2.json $COLL_ARGS2 2> $OUT/coll2_stderr.log
      echo "coll2 rc=$?"
      tail -6 $OUT/coll2_stderr.log
    fi
  fi
  echo "== dmesg"
  dmesg 2>/dev/null | grep -iE "nvrm|xid" | tail -6
} 2>&1 | tee $OUT/run.log
