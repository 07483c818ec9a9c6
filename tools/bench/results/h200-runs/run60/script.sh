# run 60: the list and wait forms again for 2 processes at 1 KiB, now with the clocks up (issue #25)
. tools/bench/nv_build_common.sh
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench
W=$B/tools/bench/nv_window_bench
for rep in 1 2; do
  for f in "x=1" "CONCCL_HOLD_TRIGGERS=1" "CONCCL_GATED_SUBMIT=1" "CONCCL_FOLD_ARRIVALS=1" \
           "CONCCL_HOLD_TRIGGERS=1 CONCCL_FOLD_ARRIVALS=1" "CONCCL_NV_ACQUIRE_SWITCH_TSG=0"; do
    env $f timeout 60 $W --procs 2 --min 1K --max 1K --iters 2000 > $OUT/w.log 2>&1
    echo "[$f] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/w.log | awk '{print $2, $3}')"
  done
  env CONCCL_HOLD_TRIGGERS=1 timeout 60 $W --procs 2 --host --min 1K --max 1K --iters 2000 > $OUT/w.log 2>&1
  echo "[host-ordered, HOLD_TRIGGERS=1] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/w.log | awk '{print $2, $3}')"
done
