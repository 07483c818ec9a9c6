# run 62: the pull all-gather and one-store arrivals on hardware (issue #28): the release test, then A/B, order alternated
. tools/bench/nv_build_common.sh
nv_configure_tests $OUT/cfg.log
nv_build test_nv_backend sdma-probe
timeout 120 $B/tests/backends/nv/test_nv_backend --gtest_filter='NvHw.CopyEngine*' > $OUT/ce.log 2>&1
echo "NvHw.CopyEngine*: rc=$?"; grep -E "^\[  (OK|FAILED|PASSED) |Failure" $OUT/ce.log | head
P=$B/tools/sdma-probe/sdma-probe
ag() { timeout 60 env "$@" > $OUT/ag.log 2>&1; echo "[$*] rc=$?"; grep -E "^ +[0-9]+ " $OUT/ag.log | awk '{print "   ", $1, $5, $7, $14, $13}'; cat $OUT/ag.log >> $OUT/all.log; }
for rep in 1 2; do
  for r in 2 4 8; do
    for v in b2b pull; do ag $P allgather --backend nv --ranks $r --variant $v --min 1K --max 64K -f 8 -n 1000 -w 50; done
  done
  for f in CONCCL_SET_ARRIVALS=0 CONCCL_SET_ARRIVALS=1; do
    ag $f $P p2p --backend nv --ranks 2 --min 1K --max 64K -f 8 -n 1000 -w 50
    ag $f $P broadcast --backend nv --ranks 4 --min 1K --max 64K -f 8 -n 1000 -w 50
  done
done
tar czf $OUT/logs.tgz -C $OUT ce.log all.log
