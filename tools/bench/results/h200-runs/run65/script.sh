# run 65: does other work on the context (a store on a second stream every N us) bring a waiting stream back sooner?
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench
W=$B/tools/bench/nv_window_bench
for rep in 1 2; do
  for k in 0 2 10 0 1 5; do
    timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 2000 --kick-us $k > $OUT/g.log 2>&1
    echo "kick ${k} us rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g.log | head -1 | awk '{print "per call", $2, "host", $3, "per replay", $7, "busy", $9, "idle", $10}')"
  done
done
