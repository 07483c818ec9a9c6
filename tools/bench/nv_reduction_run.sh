#!/bin/bash
# tools/bench/nv_reduction_run.sh - on the GPU machine (device tool, carry
# .nvdev): reductions on the H200 (#26) and the stream-ordered paths the
# call cache moved into the collectives layer (#25 item 4):
#   test_nv_reduction   call_reduction: copy engines + the PTX reduce kernel
#   test_nv_reduce      the kernel alone against reduce_on_host
#   test_nv_mp_stream, test_c_api   NCCL-shaped calls on CUDA streams
#   torch_allgather_procs.py 2/3 procs   the vote path from PyTorch
#   sdma-probe reducescatter/allreduce (when built with them): busbw tables
#   SMOKE=1: tools/bench/torch_backend_smoke.py, the torch.distributed backend on CUDA
# TESTS="..." (empty: none), VOTE_PROCS="..." (empty: none), RANKS, MAX, PROBE=0.
# Logs in $OUT; the summary last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_tests $OUT/cfg.log
TESTS=${TESTS-backends/nv/test_nv_reduction backends/nv/test_nv_reduce backends/nv/test_nv_mp_stream c_api/test_c_api}
nv_build conccl_shared $(for t in $TESTS; do basename $t; done)
[ "${PROBE:-1}" = 1 ] && nv_build sdma-probe
nv_build_time
summary=""
for t in $TESTS; do
  s0=$(date +%s)
  timeout 240 $B/tests/$t > $OUT/$(basename $t).log 2>&1; rc=$?
  line="$(basename $t): rc=$rc $(( $(date +%s) - s0 ))s $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/$(basename $t).log | tr '\n' ' ')"
  echo "$line"; summary+="$line"$'\n'
  grep -B2 -A8 "Failure" $OUT/$(basename $t).log | head -24
done
nv_python_env
for n in ${VOTE_PROCS-2 3}; do
  TORCH_WATCHDOG_S=60 timeout 80 python3 examples/python/torch_allgather_procs.py $n 1 200 > $OUT/vote_$n.log 2>&1
  line="torch_allgather_procs $n procs 1 MiB: rc=$? $(grep -E '^rank 0:' $OUT/vote_$n.log | cut -c1-160)"
  echo "$line"; summary+="$line"$'\n'
done
if $B/tools/sdma-probe/sdma-probe --help 2>&1 | grep -q reducescatter; then
  for op in reducescatter allreduce; do
    for n in ${RANKS:-2 4 8}; do
      timeout 120 $B/tools/sdma-probe/sdma-probe $op --backend nv --ranks $n -d bfloat16 -o sum --min 1K \
        --max ${MAX:-1G} --json $OUT/${op}_$n.json > $OUT/${op}_$n.txt 2>&1
      echo "$op bf16 sum, $n loopback ranks: rc=$?"; grep -vE '^\s*$' $OUT/${op}_$n.txt | tail -25
    done
  done
fi
if [ "${SMOKE:-0}" = 1 ]; then  # the torch.distributed backend on CUDA tensors (torch_backend_smoke.py)
  CONCCL_BACKEND=nv timeout 200 python3 tools/bench/torch_backend_smoke.py --nprocs 2 --deadline 180 \
    > $OUT/smoke.log 2>&1
  echo "torch backend smoke, 2 procs: rc=$?"; grep -E "PASS|FAIL|SKIP|passed" $OUT/smoke.log | cut -c1-220
fi
echo "== summary"; echo "$summary"
