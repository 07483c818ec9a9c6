# run 50: arming ahead with a spinning keeper that also ends the replays, against the default (on tick, keeper's close)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench
W=$B/tools/bench/nv_window_bench
for i in 1 2 3; do
  for f in "x=1" "CONCCL_REPLAY_ARM=ahead CONCCL_KEEPER_SPIN=1 CONCCL_REPLAY_CLOSE=keeper" \
           "CONCCL_REPLAY_ARM=ahead CONCCL_KEEPER_SPIN=1 CONCCL_REPLAY_CLOSE=keeper CONCCL_REPLAY_DEPTH=1"; do
    env $f timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g.log 2>&1
    echo "[$f] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g.log | head -1)"
  done
done
for f in "x=1" "CONCCL_REPLAY_ARM=ahead CONCCL_KEEPER_SPIN=1 CONCCL_REPLAY_CLOSE=keeper"; do
  env $f timeout 60 $W --procs 4 --graph --min 1K --max 1K --iters 1000 > $OUT/g.log 2>&1
  echo "4 procs [$f] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g.log | head -1)"
done
