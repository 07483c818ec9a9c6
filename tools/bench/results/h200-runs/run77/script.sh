# run 77: (1) where the engines' torch send/recv spends its ~0.7 ms per ring step (run 76):
# a ring and one direction per pair, the host time of each pair broadcast, with and
# without the failing-acquire TSG switch and gated submission, without and with CUDA MPS;
# (2) the torch smoke on CUDA with init_process_group(device_id=) and eager sends (a ring
# of blocking send then recv); (3) which torch Python code calls pg._get_backend; (4) what
# init_process_group("cpu:gloo,cuda:conccl") makes (probe_mixed.py).
# Console last; logs under $OUT (tarred).
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build conccl_shared
nv_build_time
nv_python_env
TD=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
python3 -c 'import torch; print("torch", torch.__version__)'
grep -rn "\._get_backend(" $TD/distributed --include=*.py > $OUT/get_backend_calls.txt
echo "pg._get_backend( in torch/distributed: $(wc -l < $OUT/get_backend_calls.txt) lines"
CONCCL_BACKEND=nv timeout 240 python3 tools/bench/torch_backend_smoke.py --nprocs 2 --device-id > $OUT/smoke_devid.log 2>&1
echo "smoke --device-id rc=$?: $(tail -1 $OUT/smoke_devid.log)"; grep -E "^FAIL" $OUT/smoke_devid.log | head -5
CONCCL_BACKEND=nv timeout 90 python3 tools/bench/results/h200-runs/run77/probe_mixed.py > $OUT/probe_mixed.log 2>&1
echo "probe cpu:gloo,cuda:conccl rc=$?:"; grep "^rank 0" $OUT/probe_mixed.log
b() {  # label pattern, then env assignments
  local label=$1 pat=$2; shift 2
  env "$@" timeout 100 python3 tools/bench/torch_p2p_bench.py --nprocs 2 --device cuda --min 1K --max 4M --iters 100 \
    --modes engines --pattern $pat --json $OUT/p2p_$label.json > $OUT/p2p_$label.log 2>&1
  echo "$label rc=$?: $(grep -E '^engines' $OUT/p2p_$label.log | awk '{printf "%s:%s/%s ", $2, $3, $6}')"
}
echo "label: bytes:us_per_step/us_bcast"
b ring ring
b oneway oneway
b ring_noswitch ring CONCCL_NV_ACQUIRE_SWITCH_TSG=0
b ring_gated ring CONCCL_GATED_SUBMIT=1
b ring_devwords ring CONCCL_POSTED_WORDS=device
nv_mps_on
b mps_ring ring
b mps_oneway oneway
nv_mps_off
cd $OUT && tar czf logs.tgz *.log *.json *.txt && rm -f *.log *.json
