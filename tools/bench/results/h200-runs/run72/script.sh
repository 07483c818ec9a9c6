# run 72: captured calls' replays of 2 and 4 processes under CUDA MPS, the stream's waits by CUDA's operations
# (memop) and by the wait kernel (CONCCL_STREAM_WAITS=kernel), issue #29 (a replay no slower than a call).
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench
nv_build_time
W=$B/tools/bench/nv_window_bench
nv_mps_on
echo "columns: bytes us/call host-us algbw msgs/call #wrong us/replay host-us/replay keeper-busy keeper-idle"
for p in 2 4; do
  for rep in 1 2; do
    for m in memop kernel; do
      CONCCL_STREAM_WAITS=$m timeout 90 $W --procs $p --graph --min 1K --max 1K --iters 1000 > $OUT/g${p}_${m}_$rep.log 2>&1
      echo "$p procs $m rc=$?: $(grep -E '^ +1024 ' $OUT/g${p}_${m}_$rep.log)"
    done
  done
done
nv_mps_off
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
