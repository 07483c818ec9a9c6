#!/bin/bash
# tools/bench/nv_graph_run.sh - on the GPU machine (device tool): collectives inside CUDA
# graphs (#29, docs/graphs.md): test_nv_local_capture (every rank in one process), then
# with and without CUDA MPS:
#   - examples/python/torch_graph_allgather.py on PROCS processes: REPLAYS replays of
#     GEMM -> all-gather -> check, every word; a 1 KiB all-gather per replay against
#     per uncaptured call;
#   - nv_window_bench --graph: per call and per replay from 1 KiB to GRAPH_MAX, every size
#     verified (JSON in $OUT);
#   - OLD=<tar of an older tree>: the example again on that tree's library, side by side.
# PROCS="2 4", REPLAYS=1000, MPS_MODES="0 1" (0: without MPS, 1: with), GRAPH_MAX=16M.
# SKIP_TESTS=1 skips the two tests (a second call on a warm machine). Logs in $OUT; the summary last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench test_nv_local_capture test_nv_reduce
nv_build_time
summary=""
if [ -z "${SKIP_TESTS:-}" ]; then
  nv_run_test backends/nv/test_nv_local_capture 200 40
  nv_run_test backends/nv/test_nv_reduce 200 20
fi
NEW_PY=$PWD/python NEW_EX=$PWD/examples/python NEW_LIB=$(find $B -name libconccl.so | head -1)
forms="new"
if [ -n "${OLD:-}" ]; then
  rm -rf /tmp/old_tree; mkdir -p /tmp/old_tree && tar -xf "$OLD" -C /tmp/old_tree
  ( cd /tmp/old_tree && cmake -S . -B /tmp/nvb_old -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_BUILD_TESTS=OFF \
      > $OUT/cfg_old.log 2>&1 && ninja -C /tmp/nvb_old conccl_shared 2>&1 | grep -E "error" | head )
  forms="new old"
fi
for mps in ${MPS_MODES:-0 1}; do
  [ "$mps" = 1 ] && nv_mps_on
  for n in ${PROCS:-2 4}; do
    for form in $forms; do
      if [ $form = new ]; then export PYTHONPATH=$NEW_PY CONCCL_LIBRARY=$NEW_LIB; ex=$NEW_EX
      else export PYTHONPATH=/tmp/old_tree/python CONCCL_LIBRARY=$(find /tmp/nvb_old -name libconccl.so | head -1)
           ex=/tmp/old_tree/examples/python; fi
      log=$OUT/graph_${form}_${n}_mps$mps.log
      timeout 200 python3 $ex/torch_graph_allgather.py $n ${REPLAYS:-1000} > $log 2>&1
      line="example $form $n procs mps=$mps: rc=$? $(grep -E '^rank 0' $log | sed 's/.*check, //')"
      echo "$line"; summary+="$line"$'\n'; grep -E "WRONG|Error|error" $log | head -3 | cut -c1-300
    done
    log=$OUT/window_graph_${n}_mps$mps
    timeout 300 $B/tools/bench/nv_window_bench --procs $n --graph --min 1K --max ${GRAPH_MAX:-16M} --iters 500 \
      --json $log.json > $log.log 2>&1
    line="nv_window_bench --graph $n procs mps=$mps: rc=$?"
    echo "$line"; cat $log.log; summary+="$line"$'\n'"$(cat $log.log)"$'\n'
  done
  [ "$mps" = 1 ] && nv_mps_off
done
echo "== summary"; nvidia-smi --query-gpu=name --format=csv,noheader; echo "$summary"
