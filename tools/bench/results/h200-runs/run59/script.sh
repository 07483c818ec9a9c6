# run 59: small messages with the clocks up (1.5 s warm-up first): hand-offs, one process, process per rank, replays
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_handoff_bench sdma-probe nv_window_bench
nvidia-smi --query-gpu=timestamp,clocks.gr,clocks.video,power.draw --format=csv,noheader -lms 200 > $OUT/smi.csv 2>&1 &
SMI=$!
timeout 200 $B/tools/bench/nv_handoff_bench --rounds 50 --samples 300 --json $OUT/handoff.json > $OUT/handoff.log 2>&1
echo "nv_handoff_bench rc=$?"; tail -24 $OUT/handoff.log
P=$B/tools/sdma-probe/sdma-probe; W=$B/tools/bench/nv_window_bench
for r in 2 4 8; do
  timeout 60 $P allgather --backend nv --ranks $r --min 1K --max 64K -f 8 -n 1000 -w 50 --json $OUT/ag$r.json > $OUT/ag$r.log 2>&1
  echo "one process, $r ranks rc=$?"; grep -E "^ +[0-9]+ " $OUT/ag$r.log | awk '{print $1, $7, $14}'
done
for p in 2 4 8; do
  timeout 120 $W --procs $p --min 1K --max 64K --iters 1000 --json $OUT/w$p.json > $OUT/w$p.log 2>&1
  echo "procs $p rc=$?"; grep -E "^ +[0-9]+ " $OUT/w$p.log | awk '{print $1, $2, $3}'
done
timeout 60 $W --procs 2 --host --min 1K --max 1K --iters 1000 > $OUT/wh.log 2>&1
echo "procs 2 host-ordered rc=$?"; grep -E "^ +[0-9]+ " $OUT/wh.log | awk '{print $1, $2, $3}'
for i in 1 2 3 4; do
  timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g$i.log 2>&1
  echo "graph run $i rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g$i.log | head -1)"
done
kill $SMI; echo "clocks (gr, video) seen: $(cut -d, -f2,3 $OUT/smi.csv | sort | uniq -c | sort -rn | head -4 | tr '\n' ';')"
