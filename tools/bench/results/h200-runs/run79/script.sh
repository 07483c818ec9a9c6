# run 79: FSDP2 with the group on gloo and FSDP's all-gathers / reduce-scatters on the engines
# (conccl.torch.FSDPAllGather / FSDPReduceScatter), after run 78's two such runs trained 20 steps
# and then died of SIGSEGV before their check's summary (the check then all-gathered every
# parameter over gloo with CUDA tensors; it now compares each rank's own shard, no collective).
# Staged, then FSDP's buffers from the companion's pool; --check, GEMM kernels' time; Python's
# fault handler on, so a crash names where. Console last; logs appended to $OUT/run79.log.
. tools/bench/nv_build_common.sh
L=$OUT/run79.log
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env
f() {  # label, then env assignments; more arguments in $extra
  local label=$1; shift
  env PYTHONFAULTHANDLER=1 "$@" timeout 150 torchrun --nproc-per-node 2 examples/python/fsdp2_train.py --mode fsdp2 \
    --steps ${steps:-20} --check --profile-gemm 5 --backend gloo --fsdp-comms conccl ${extra:-} > /tmp/fsdp.log 2>&1
  echo "fsdp2 $label rc=$?: $(grep -E '^fsdp2,' /tmp/fsdp.log | cut -c1-400)"
  grep -E "Error|error|differs|Fatal|File \"" /tmp/fsdp.log | grep -v elastic | head -12 | cut -c1-300
  { echo "== fsdp2 $label"; cat /tmp/fsdp.log; } >> $L
}
f staged CONCCL_TORCH_POOL_BYTES=0
f pooled CONCCL_TORCH_POOL_BYTES=$((256 << 20))
CONCCL_BACKEND=nv timeout 200 python3 tools/bench/torch_backend_smoke.py --nprocs 2 > /tmp/smoke.log 2>&1
echo "smoke rc=$?: $(tail -1 /tmp/smoke.log)"; grep -E "^(FAIL|SKIP)" /tmp/smoke.log | cut -c1-300 | head -6; cat /tmp/smoke.log >> $L
# groups made and destroyed 10 times (their device memory must go back each time), then the
# multi-GPU choice's single-GPU path (the smoke above made its groups through it)
timeout 200 python3 tools/bench/torch_group_cycles.py --nprocs 2 --cycles 10 --json $OUT/cycles.json > /tmp/cyc.log 2>&1
echo "cycles rc=$?: $(grep -E '^# free' /tmp/cyc.log)"; grep -E "Error|error" /tmp/cyc.log | head -5 | cut -c1-300
cat /tmp/cyc.log >> $L
# run 36's larger model (102 M parameters), where the GEMMs are long enough to overlap
# (RUN79_BIG=0 leaves it out where the device time is short)
big="--dim 1024 --layers 8 --heads 8 --batch 8 --seq 256"
if [ "${RUN79_BIG:-1}" = 1 ]; then
  steps=10 extra="$big" f staged_102M CONCCL_TORCH_POOL_BYTES=0
  steps=10 extra="$big" f pooled_102M CONCCL_TORCH_POOL_BYTES=$((2 << 30))
fi
