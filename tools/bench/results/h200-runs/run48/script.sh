# run 48: torch backend graph check, keeper spin A/B, then #28's large A/B
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench sdma-probe
nv_build_time
nv_python_env
CONCCL_BACKEND=nv timeout 200 python3 tools/bench/torch_backend_smoke.py --nprocs 2 --deadline 180 > $OUT/smoke2.log 2>&1
echo "smoke 2 procs rc=$?"; grep -E "^(PASS|FAIL|SKIP)|passed" $OUT/smoke2.log | grep -v "^PASS" | cut -c1-400
grep -E "CUDA graph" $OUT/smoke2.log | cut -c1-300
W=$B/tools/bench/nv_window_bench
for f in "x=1" "CONCCL_REPLAY_ARM=ahead CONCCL_KEEPER_SPIN=1" "CONCCL_REPLAY_ARM=ahead CONCCL_KEEPER_SPIN=1 CONCCL_REPLAY_DEPTH=1"; do
  env $f timeout 60 $W --procs 2 --graph --min 1K --max 2K --iters 400 > $OUT/spin.log 2>&1
  echo "graph 2 procs [$f] rc=$?"; grep -E "^ +[0-9]+ " $OUT/spin.log | head -2
done
timeout 300 bash tools/bench/nv_large_ab.sh 2>&1 | tail -24
