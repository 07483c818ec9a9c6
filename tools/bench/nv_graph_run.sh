#!/bin/bash
# tools/bench/nv_graph_run.sh - on the GPU machine (device tool): collectives inside CUDA
# graphs (#29, docs/graphs.md): examples/python/torch_graph_allgather.py
# on 2 and 4 processes (1000 replays of GEMM -> all-gather -> check, every word; a 1 KiB
# all-gather per replay against per uncaptured call), then the same with CUDA MPS.
# PROCS="2 4", REPLAYS=1000. Logs in $OUT; the summary last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_lib $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env $PWD/python
summary=""
for mps in 0 ${MPS:-1}; do
  [ "$mps" = 1 ] && { export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
                      mkdir -p /tmp/mps_pipe /tmp/mps_log; nvidia-cuda-mps-control -d; sleep 1; }
  for n in ${PROCS:-2 4}; do
    timeout 200 python3 examples/python/torch_graph_allgather.py $n ${REPLAYS:-1000} > $OUT/graph_${n}_mps$mps.log 2>&1
    line="graph $n procs mps=$mps: rc=$? $(grep -E '^rank 0' $OUT/graph_${n}_mps$mps.log)"
    echo "$line"; summary+="$line"$'\n'; grep -E "WRONG|Error|error" $OUT/graph_${n}_mps$mps.log | head -5 | cut -c1-300
  done
  [ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control
done
echo "$summary" > $OUT/summary.txt
echo "== summary"; echo "$summary"
