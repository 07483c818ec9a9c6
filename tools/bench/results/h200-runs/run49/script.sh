# run 49: captured replays ended by the keeper (CONCCL_REPLAY_CLOSE=keeper) against the closing list
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench test_nv_local_capture
nv_build_time
summary=""
CONCCL_REPLAY_CLOSE=keeper nv_run_test backends/nv/test_nv_local_capture 200 20
W=$B/tools/bench/nv_window_bench
for mps in 0 1; do
  [ $mps = 1 ] && nv_mps_on
  for n in 2 4; do
    for f in "x=1" "CONCCL_REPLAY_CLOSE=keeper" "x=1" "CONCCL_REPLAY_CLOSE=keeper"; do
      [ $mps = 1 ] && [ $n = 4 ] && continue
      env $f timeout 60 $W --procs $n --graph --min 1K --max 4K --iters 400 > $OUT/g.log 2>&1
      echo "procs=$n mps=$mps [$f] rc=$?"; grep -E "^ +[0-9]+ " $OUT/g.log | head -3
    done
  done
  [ $mps = 1 ] && nv_mps_off
done
