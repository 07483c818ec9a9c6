#!/bin/bash
# tools/bench/nv_multinode_run.sh - on the GPU machine (device tool): "conccl" process
# groups across nodes (#32, docs/multinode.md) with the H200 playing 2 "nodes" of 2
# processes (CONCCL_RANKS_PER_NODE=2), CUDA tensors, gloo between the nodes (NCCL
# refuses two ranks of one group on one GPU, so it cannot be the inter-node backend on
# a single-GPU machine):
#   torch_backend_smoke.py, 4 processes across 2 nodes, and 2 processes as 2 nodes of 1:
#     every op, DDP and FSDP2 steps against their references
#   torch_multinode_bench.py, 4 processes: one node vs 2 nodes, per-call times
# Logs and JSON in $OUT; the summary last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nv_configure_lib $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env $PWD/python; export CONCCL_BACKEND=nv
export CONCCL_INTER_NODE_BACKEND=gloo GLOO_SOCKET_IFNAME=lo
summary=""
for pn in 2:4 1:2; do
  per=${pn%:*}; n=${pn#*:}
  CONCCL_RANKS_PER_NODE=$per timeout 230 python3 tools/bench/torch_backend_smoke.py --nprocs $n --deadline 200 \
    > $OUT/smoke_${per}x$n.log 2>&1
  line="smoke $n procs, $per per node: rc=$? $(grep -E 'passed' $OUT/smoke_${per}x$n.log)"
  echo "$line"; summary+="$line"$'\n'; grep -E "^FAIL" $OUT/smoke_${per}x$n.log | cut -c1-400
done
for per in 4 2; do
  CONCCL_RANKS_PER_NODE=$per timeout 150 python3 tools/bench/torch_multinode_bench.py --nprocs 4 \
    --sizes ${SIZES:-64K,1M,16M} --iters ${ITERS:-20} --json $OUT/bench_per$per.json > $OUT/bench_per$per.log 2>&1
  echo "bench, $per per node: rc=$?"; tail -n +1 $OUT/bench_per$per.log | grep -E "^(layout|Process|[0-9] nodes)" 
  summary+="$(grep -E '^(Process|[0-9] nodes)' $OUT/bench_per$per.log)"$'\n'
done
echo "$summary" > $OUT/summary.txt
echo "== summary"; echo "$summary"
