# run 73: the automatic wait form (CONCCL_STREAM_WAITS unset): MPS seen as the driver says, the multi-process
# stream tests with and without MPS, and 2 and 4 processes' calls on a stream with and without MPS.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench test_nv_cuda test_nv_mp_stream test_nv_local_capture
nv_build_time
W=$B/tools/bench/nv_window_bench
row() { echo "$1 rc=$2: $(grep -E '^ +(1024|8192|65536) ' $OUT/$3 | awk '{printf "%s:%s(h%s,w%s) ", $1/1024 "K", $2, $3, $6}')"; }
CONCCL_TEST_EXPECT_MPS=0 nv_run_test backends/nv/test_nv_cuda 60 20
nv_run_test backends/nv/test_nv_mp_stream 180 20
for p in 2 4; do timeout 90 $W --procs $p --min 1K --max 64K --iters 2000 > $OUT/p${p}.log 2>&1; row "$p procs, no MPS (auto: memop)" $? p${p}.log; done
nv_mps_on
mv $OUT/test_nv_cuda.log $OUT/test_nv_cuda_nomps.log; mv $OUT/test_nv_mp_stream.log $OUT/test_nv_mp_stream_nomps.log
CONCCL_TEST_EXPECT_MPS=1 nv_run_test backends/nv/test_nv_cuda 60 20
nv_run_test backends/nv/test_nv_mp_stream 180 20
nv_run_test backends/nv/test_nv_local_capture 120 20
for p in 2 4; do
  timeout 90 $W --procs $p --min 1K --max 64K --iters 2000 > $OUT/m${p}.log 2>&1; row "$p procs, MPS (auto: kernel)" $? m${p}.log
  CONCCL_STREAM_WAITS=memop timeout 90 $W --procs $p --min 1K --max 64K --iters 2000 > $OUT/mm${p}.log 2>&1; row "$p procs, MPS, memop" $? mm${p}.log
done
nv_mps_off
echo "$summary"
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
