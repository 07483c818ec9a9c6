# run 56: the floor of a small all-gather on raw channels, by arrival form and engine set, against the library's (issue #28)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_handoff_bench sdma-probe
timeout 200 $B/tools/bench/nv_handoff_bench --rounds 50 --samples 300 --json $OUT/handoff.json > $OUT/handoff.log 2>&1
echo "nv_handoff_bench rc=$?"; grep -E "1 KiB|submit" $OUT/handoff.log
P=$B/tools/sdma-probe/sdma-probe
for f in "x=1" "CONCCL_FOLD_ARRIVALS=1" "x=1" "CONCCL_FOLD_ARRIVALS=1"; do
  env $f timeout 60 $P allgather --backend nv --ranks 2 --min 1K --max 1K -n 1000 -w 50 > $OUT/ag.log 2>&1
  echo "allgather 2 ranks 1K [$f] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/ag.log)"
done
