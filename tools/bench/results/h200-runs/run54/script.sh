# run 54: how long a copy-engine channel takes to pass an acquire (nv_handoff_bench), by releaser and place
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_handoff_bench
timeout 240 $B/tools/bench/nv_handoff_bench --rounds 100 --samples 100 --json $OUT/handoff.json > $OUT/handoff.log 2>&1
echo "nv_handoff_bench rc=$?"; tail -25 $OUT/handoff.log
