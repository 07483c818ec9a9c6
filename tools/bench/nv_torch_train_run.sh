#!/bin/bash
# tools/bench/nv_torch_train_run.sh - on the GPU machine (device tool): the "conccl"
# torch.distributed backend on the H200 (#27):
#   torch_backend_smoke.py, 2 and 4 processes: every op, DDP and FSDP2 steps
#   examples/python/fsdp2_train.py under torchrun: FSDP2 and DDP, 2 and 4 processes,
#   STEPS steps (50), --check (bit for bit against the exact reference)
# SMOKE="2 4" (empty: none), TRAIN="fsdp2:2 fsdp2:4 ddp:2 ddp:4", COMPARE, MPS, STEPS, BASELINE
# (forward+backward passes timed alone after a compared run, 20), PROFILE (steps whose GEMM
# kernels are timed under torch.profiler after a compared run, 0: none), EXTRA (more
# arguments for the training script). Logs and JSON in $OUT; the summary last.
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb
FINAL=$OUT; OUT=$FINAL/logs; mkdir -p $OUT  # packed into $FINAL/logs.tgz at the end (one file comes back)
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_BUILD_TESTS=OFF > $OUT/cfg.log 2>&1
ninja -C $B conccl_shared 2>&1 | grep -E "error|warning: " | head
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD/python CONCCL_LIBRARY=$(find $B -name "libconccl.so" | head -1) CONCCL_BACKEND=nv
summary=""
for n in ${SMOKE-2 4}; do
  timeout 200 python3 tools/bench/torch_backend_smoke.py --nprocs $n --deadline 180 > $OUT/smoke_$n.log 2>&1
  line="smoke $n procs: rc=$? $(grep -E 'passed' $OUT/smoke_$n.log)"
  echo "$line"; summary+="$line"$'\n'; grep -E "^FAIL" $OUT/smoke_$n.log | cut -c1-300
done
for mn in ${TRAIN-fsdp2:2 fsdp2:4 ddp:2 ddp:4}; do
  m=${mn%:*}; n=${mn#*:}
  timeout 280 torchrun --nproc-per-node $n examples/python/fsdp2_train.py --mode $m --steps ${STEPS:-50} --check \
    --json $OUT/train_${m}_$n.json ${EXTRA:-} > $OUT/train_${m}_$n.log 2>&1
  line="train $m $n procs: rc=$? $(grep -E '^(fsdp2|ddp),' $OUT/train_${m}_$n.log)"
  echo "$line"; summary+="$line"$'\n'; grep -E "differs|Error|error" $OUT/train_${m}_$n.log | head -5 | cut -c1-300
done
# The step against SM collectives (tools/bench/torch_sm_reference.py), same script, same check;
# COMPARE="fsdp2:2 fsdp2:4" (empty: none), MPS=1 also under CUDA MPS (both backends).
for mps in 0 ${MPS:-}; do
  [ "$mps" = 1 ] && { export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
                      mkdir -p /tmp/mps_pipe /tmp/mps_log; nvidia-cuda-mps-control -d; sleep 1; }
  for mn in ${COMPARE-fsdp2:2 fsdp2:4}; do
    m=${mn%:*}; n=${mn#*:}
    for be in conccl smref; do
      tag=${m}_${n}_${be}_mps$mps
      timeout 280 torchrun --nproc-per-node $n tools/bench/torch_sm_reference.py examples/python/fsdp2_train.py \
        --backend $be --mode $m --steps ${STEPS:-50} --check --compute-baseline ${BASELINE:-20} --profile-gemm ${PROFILE:-0} --json $OUT/cmp_$tag.json ${EXTRA:-} > $OUT/cmp_$tag.log 2>&1
      line="compare $m $n procs $be mps=$mps: rc=$? $(grep -E '^(fsdp2|ddp),' $OUT/cmp_$tag.log)"
      echo "$line"; summary+="$line"$'\n'; grep -E "differs|Error|error" $OUT/cmp_$tag.log | head -3 | cut -c1-300
    done
  done
  [ "$mps" = 1 ] && echo quit | nvidia-cuda-mps-control
done
echo "$summary" > $OUT/summary.txt
tar czf $FINAL/logs.tgz -C $FINAL logs && rm -rf $FINAL/logs
echo "== summary"; echo "$summary"
