# run 70: the default CONCCL_STREAM_WAITS=auto on hardware: the nv tests, then one process on a stream (small
# calls poll) against memop, and process per rank on one GPU (auto keeps memop there) against kernel under MPS.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench sdma-probe test_nv_cuda test_nv_reduce test_nv_mp_stream test_nv_local_capture test_nv_reduction test_nv_backend
nv_build_time
for t in test_nv_cuda test_nv_reduce test_nv_mp_stream test_nv_local_capture test_nv_reduction test_nv_backend; do
  nv_run_test backends/nv/$t 180 20
done
W=$B/tools/bench/nv_window_bench
row() { echo "$1 rc=$2: $(grep -E '^ +(1024|8192|65536|1048576) ' $OUT/$3 | awk '{printf "%s:%s(h%s,w%s) ", $1/1024 "K", $2, $3, $6}')"; }
run() { local name=$1 envs=$2 log=$3; shift 3; env $envs timeout 90 "$@" > $OUT/$log 2>&1; row "$name" $? $log; }
for rep in 1 2; do
  for r in 2 4 8; do
    run "one process $r ranks auto" x=1 r${r}a_$rep.log $W --ranks $r --min 1K --max 1M --iters 1000
    run "one process $r ranks memop" CONCCL_STREAM_WAITS=memop r${r}m_$rep.log $W --ranks $r --min 1K --max 1M --iters 1000
  done
  run "2 procs auto (memop)" x=1 p2a_$rep.log $W --procs 2 --min 1K --max 64K --iters 2000
done
# reductions on a stream, one process (their waits do not poll: unchanged)
timeout 90 $B/tools/sdma-probe/sdma-probe allreduce --backend nv --ranks 4 -b 1K -e 1M -f 32 -n 200 > $OUT/ar.log 2>&1
echo "allreduce one process 4 ranks rc=$?"; grep -E "^ +[0-9]+ " $OUT/ar.log | awk '{print "   ", $1, $9, "us #wrong", $14}'
echo "$summary"
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
