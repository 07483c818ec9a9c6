# run 77: where the engines' torch send/recv spends its ~0.7 ms per ring step (run 76):
# the same bench without and with CUDA MPS (two processes' contexts time-slice without it).
# Console last; logs under $OUT.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env
b() {  # label, then env assignments
  local label=$1; shift
  env "$@" timeout 120 python3 tools/bench/torch_p2p_bench.py --nprocs 2 --device cuda --min 1K --max 4M --iters 100 \
    --modes engines --json $OUT/p2p_$label.json > $OUT/p2p_$label.log 2>&1
  echo "$label rc=$?: $(grep -E '^engines' $OUT/p2p_$label.log | awk '{printf "%s:%s ", $2, $3}')"
}
b nomps
b nomps_again
nv_mps_on
b mps
b mps_memop CONCCL_STREAM_WAITS=memop
nv_mps_off
