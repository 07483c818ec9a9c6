# run 52: the session's final defaults on hardware (ticks by writes, the keeper's close, striping from 8 ranks)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench test_nv_local_capture sdma-probe
nv_build_time
summary=""
nv_run_test backends/nv/test_nv_local_capture 200 20
nv_python_env
for n in 2 4; do
  timeout 200 python3 examples/python/torch_graph_allgather.py $n 1000 > $OUT/example_$n.log 2>&1
  echo "torch_graph_allgather.py $n procs: rc=$? $(grep -E '^rank 0' $OUT/example_$n.log | sed 's/.*check, //')"
  grep -E "WRONG|Error|error" $OUT/example_$n.log | head -3 | cut -c1-300
done
CONCCL_BACKEND=nv timeout 200 python3 tools/bench/torch_backend_smoke.py --nprocs 4 --deadline 180 > $OUT/smoke4.log 2>&1
echo "smoke 4 procs rc=$?"; grep -E "^(FAIL|SKIP)|passed|CUDA graph" $OUT/smoke4.log | cut -c1-300
timeout 100 $B/tools/sdma-probe/sdma-probe allgather --backend nv --ranks 8 --min 64M --max 256M -f 2 -n 5 -w 1 > $OUT/ag8.log 2>&1
echo "allgather 8 ranks (striped by default) rc=$?"; grep -E "^ +[0-9]{6,}" $OUT/ag8.log
