#!/bin/bash
# tools/bench/nv_window_torch_run.sh - on the GPU machine (device tool, carry
# .nvdev), issue #25's user programs: examples/python/torch_window_allgather.py
# (GEMM -> all-gather -> consumer on the stream, every byte checked) for 2, 3
# and 4 processes with the window and with PyTorch's allocator, then
# sdma-probe allgather --backend nv --procs N through windows and through
# plans (--no-windows), and the stream tests. Logs in $OUT; lines last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_tests /tmp/cfg.log
nv_build conccl_shared sdma-probe test_nv_mp_stream test_c_api
for t in backends/nv/test_nv_mp_stream c_api/test_c_api; do
  timeout 200 $B/tests/$t > /tmp/t.log 2>&1
  echo "$(basename $t): rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' /tmp/t.log | tr '\n' ' ')"
done
nv_python_env
for n in ${PROCS:-2 3 4}; do
  for mode in "" --default-allocator; do
    TORCH_WATCHDOG_S=100 timeout 120 python3 examples/python/torch_window_allgather.py $n ${ROUNDS:-100} $mode > /tmp/w.log 2>&1
    echo "torch $n procs ${mode:-window}: rc=$? $(grep -E '^rank 0:' /tmp/w.log | cut -c1-220)"
    grep -E "WRONG|Error|error" /tmp/w.log | head -3
  done
done
for n in ${PROBE_PROCS:-2 4}; do
  for w in "" --no-windows; do
    timeout 150 $B/tools/sdma-probe/sdma-probe allgather --backend nv --procs $n --buffers cuda --min 1K --max 64M \
      --step-factor 8 --timeout-ms 60000 $w --json $OUT/probe_${n}${w}.json > /tmp/p.txt 2>&1
    echo "sdma-probe allgather --procs $n ${w:-(windows)}: rc=$?"; grep -E "^ +[0-9]|Bootstrap|Out of" /tmp/p.txt | cut -c1-120
  done
done
