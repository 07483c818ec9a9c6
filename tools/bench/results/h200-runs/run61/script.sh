# run 61: hand-offs and the small all-gather's floor by arrival form, clocks up (issues #28, #25)
. tools/bench/nv_build_common.sh
nv_configure_tests $OUT/cfg.log
nv_build nv_handoff_bench
timeout 200 $B/tools/bench/nv_handoff_bench --rounds 50 --samples 300 --json $OUT/handoff.json > $OUT/handoff.log 2>&1
echo "nv_handoff_bench rc=$?"; cat $OUT/handoff.log
