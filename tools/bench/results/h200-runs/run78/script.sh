# run 78 (not run: the sixteenth session's device time ran out; FSDP2 comms added in the seventeenth): torch send/recv on the engines
# with host-ordered pair transfers (CONCCL_TORCH_P2P_ORDER=host, opt-in until this measures
# it) against stream-ordered ones (the default, run 77's 2.2 ms ring
# step without MPS), a ring and one direction per pair (no MPS: the device time left); the
# smoke with device_id (eager sends, send refused under capture, FSDP2, DDP, graphs).
# Console last; every log appended to $OUT/run78.log as it comes (a cut run keeps them).
. tools/bench/nv_build_common.sh
L=$OUT/run78.log
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env
b() {  # label pattern, then env assignments
  local label=$1 pat=$2; shift 2
  env "$@" timeout 90 python3 tools/bench/torch_p2p_bench.py --nprocs 2 --device cuda --min 1K --max 4M --iters 50 \
    --modes engines --pattern $pat > /tmp/p2p.log 2>&1
  echo "$label rc=$?: $(grep -E '^engines' /tmp/p2p.log | awk '{printf "%s:%s/%s ", $2, $3, $6}')"
  { echo "== $label"; cat /tmp/p2p.log; } >> $L
}
echo "label: bytes:us_per_step/us_bcast"
b host_ring ring CONCCL_TORCH_P2P_ORDER=host
b stream_ring ring
CONCCL_TORCH_P2P_ORDER=host CONCCL_BACKEND=nv timeout 200 python3 tools/bench/torch_backend_smoke.py --nprocs 2 --device-id > /tmp/smoke.log 2>&1
echo "smoke --device-id, host order rc=$?: $(tail -1 /tmp/smoke.log)"; grep -E "^FAIL" /tmp/smoke.log | head -5; cat /tmp/smoke.log >> $L
b host_oneway oneway CONCCL_TORCH_P2P_ORDER=host
b stream_oneway oneway
# FSDP2 with the group on gloo and FSDP's all-gathers / reduce-scatters on the engines
# (conccl.torch.FSDPAllGather / FSDPReduceScatter), bit for bit against the reference: staged,
# then with FSDP's buffers carved from the companion's pool (CONCCL_TORCH_POOL_BYTES: no copy
# kernel); then the same model with the whole group on conccl. GEMM kernels' time per step.
f() {  # label, then env assignments; the backend arguments in $args
  local label=$1; shift
  env "$@" timeout 200 torchrun --nproc-per-node 2 examples/python/fsdp2_train.py --mode fsdp2 --steps 20 --check \
    --profile-gemm 5 $args > /tmp/fsdp.log 2>&1
  echo "fsdp2 $label rc=$?: $(grep -E '^fsdp2,' /tmp/fsdp.log | cut -c1-330)"
  grep -E "Error|error|differs" /tmp/fsdp.log | head -4 | cut -c1-300; { echo "== fsdp2 $label"; cat /tmp/fsdp.log; } >> $L
}
args="--backend gloo --fsdp-comms conccl" f staged_comms CONCCL_TORCH_POOL_BYTES=0
args="--backend gloo --fsdp-comms conccl" f pooled_comms CONCCL_TORCH_POOL_BYTES=$((256 << 20))
args="--backend conccl" f conccl_group CONCCL_TORCH_POOL_BYTES=0
