# run 63: the session's defaults on hardware (pull automatic, stored arrivals): nv tests, then the all-gather sizes where auto now pulls
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build test_nv_backend test_nv_cuda test_nv_local_capture test_nv_mp_stream test_nv_reduction sdma-probe
for t in test_nv_backend test_nv_cuda test_nv_local_capture test_nv_mp_stream test_nv_reduction; do
  timeout 200 $B/tests/backends/nv/$t > $OUT/$t.log 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/$t.log | tr '\n' ' ')"; grep -E "^\[  FAILED  \]|Failure" $OUT/$t.log | head -5
done
P=$B/tools/sdma-probe/sdma-probe
ag() { timeout 60 env "$@" > $OUT/ag.log 2>&1; echo "[$*] rc=$?"; grep -E "^ +[0-9]+ " $OUT/ag.log | awk '{print "   ", $1, $5, $7, $14, $13}'; cat $OUT/ag.log >> $OUT/all.log; }
for rep in 1 2; do
  for r in 2 4 8; do
    ag $P allgather --backend nv --ranks $r --min 1K --max 256K -f 4 -n 500 -w 50
    ag $P allgather --backend nv --ranks $r --variant b2b --min 16K --max 256K -f 4 -n 500 -w 50
  done
done
tar czf $OUT/logs.tgz -C $OUT all.log test_nv_backend.log test_nv_cuda.log test_nv_local_capture.log test_nv_mp_stream.log test_nv_reduction.log
