# run 55: the floor of a small all-gather on raw channels against the library's (issue #28)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_handoff_bench sdma-probe
timeout 200 $B/tools/bench/nv_handoff_bench --rounds 100 --samples 300 --json $OUT/handoff.json > $OUT/handoff.log 2>&1
echo "nv_handoff_bench rc=$?"; tail -20 $OUT/handoff.log
P=$B/tools/sdma-probe/sdma-probe
for r in 2 8; do
  timeout 60 $P allgather --backend nv --ranks $r --min 1K --max 1K -n 1000 -w 50 > $OUT/ag$r.log 2>&1
  echo "allgather $r ranks 1K rc=$?"; grep -E "^ +[0-9]+ " $OUT/ag$r.log
done
timeout 60 $P p2p --backend nv --ranks 2 --min 1K --max 1K -n 1000 -w 50 > $OUT/p2p.log 2>&1
echo "p2p 1K rc=$?"; grep -E "^ +[0-9]+ " $OUT/p2p.log
