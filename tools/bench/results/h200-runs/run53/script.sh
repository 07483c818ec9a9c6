# run 53: the corrected striping default (8 ranks), then where a slow replay's time goes (keeper busy/idle, fast vs slow runs)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench sdma-probe
nv_build_time
P=$B/tools/sdma-probe/sdma-probe
for r in 1 2; do
  timeout 100 $P allgather --backend nv --ranks 8 --min 64M --max 256M -f 2 -n 5 -w 1 > $OUT/ag8_$r.log 2>&1
  echo "allgather 8 ranks default rc=$?"; grep -E "^ +[0-9]{6,}" $OUT/ag8_$r.log
  CONCCL_STRIPE_MIN_BYTES=0 timeout 100 $P allgather --backend nv --ranks 8 --min 64M --max 64M -n 5 -w 1 > $OUT/ag8w_$r.log 2>&1
  echo "allgather 8 ranks whole (STRIPE_MIN_BYTES=0) rc=$?"; grep -E "^ +[0-9]{6,}" $OUT/ag8w_$r.log
done
W=$B/tools/bench/nv_window_bench
for i in 1 2 3 4 5 6; do
  timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g$i.log 2>&1
  echo "graph run $i rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g$i.log | head -1)"
done
grep -E "size|bytes" $OUT/g1.log | head -2
