# run 64: the replays' two modes, lined up across the two processes (CONCCL_KEEPER_TRACE, tools/bench/keeper_trace.py)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench
W=$B/tools/bench/nv_window_bench
mkdir -p $OUT/trace
for i in 1 2 3 4 5 6; do
  rm -f /tmp/kt.*
  CONCCL_KEEPER_TRACE=/tmp/kt timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 2000 > $OUT/g.log 2>&1
  echo "== graph run $i rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g.log | head -1 | awk '{print "per call", $2, "per replay", $7, "busy", $9, "idle", $10}')"
  mkdir -p $OUT/trace/$i; cp /tmp/kt.*.csv $OUT/trace/$i/ 2>/dev/null
  python3 tools/bench/keeper_trace.py $OUT/trace/$i/*.csv | grep -v "^ *$"
done
tar czf $OUT/traces.tgz -C $OUT trace
rm -rf $OUT/trace
