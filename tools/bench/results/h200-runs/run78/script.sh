# run 78: torch send/recv on the engines with host-ordered pair transfers (the new default,
# CONCCL_TORCH_P2P_ORDER=host) against stream-ordered ones (=stream, run 77's 2.2 ms ring
# step without MPS), a ring and one direction per pair, without and with CUDA MPS; the
# smoke with device_id (eager sends, send refused under capture, FSDP2, DDP, graphs).
# Console last; logs under $OUT (tarred).
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env
CONCCL_BACKEND=nv timeout 240 python3 tools/bench/torch_backend_smoke.py --nprocs 2 --device-id > $OUT/smoke_devid.log 2>&1
echo "smoke --device-id rc=$?: $(tail -1 $OUT/smoke_devid.log)"; grep -E "^FAIL" $OUT/smoke_devid.log | head -5
b() {  # label pattern, then env assignments
  local label=$1 pat=$2; shift 2
  env "$@" timeout 100 python3 tools/bench/torch_p2p_bench.py --nprocs 2 --device cuda --min 1K --max 16M --iters 100 \
    --modes engines --pattern $pat --json $OUT/p2p_$label.json > $OUT/p2p_$label.log 2>&1
  echo "$label rc=$?: $(grep -E '^engines' $OUT/p2p_$label.log | awk '{printf "%s:%s/%s ", $2, $3, $6}')"
}
echo "label: bytes:us_per_step/us_bcast"
b host_ring ring
b host_oneway oneway
b stream_ring ring CONCCL_TORCH_P2P_ORDER=stream
b stream_oneway oneway CONCCL_TORCH_P2P_ORDER=stream
nv_mps_on
b mps_host_ring ring
b mps_host_oneway oneway
b mps_stream_ring ring CONCCL_TORCH_P2P_ORDER=stream
nv_mps_off
cd $OUT && tar czf logs.tgz *.log *.json && rm -f *.log *.json
