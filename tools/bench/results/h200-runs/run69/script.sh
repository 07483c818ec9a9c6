# run 69: the stream's waits as a one-thread kernel (CONCCL_STREAM_WAITS=kernel) against CUDA's stream memory
# operations, one process per rank, with and without CUDA MPS; traced (CONCCL_CALL_TRACE). Tests first.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench test_nv_cuda test_nv_reduce test_nv_mp_stream
nv_build_time
nv_run_test backends/nv/test_nv_cuda 60 30
nv_run_test backends/nv/test_nv_reduce 120 10
CONCCL_STREAM_WAITS=kernel nv_run_test backends/nv/test_nv_mp_stream 180 30
W=$B/tools/bench/nv_window_bench
T=tools/bench/call_trace.py
one() {  # name env args...
  local name=$1 envs=$2; shift 2
  rm -f /tmp/ct.*.csv
  env $envs CONCCL_CALL_TRACE=/tmp/ct timeout 60 $W "$@" > $OUT/w.log 2>&1
  echo "== $name rc=$? : $(grep -E '^ +(1024|8192|65536) ' $OUT/w.log | awk '{printf "%s:%s(h%s,w%s) ", $1/1024 "K", $2, $3, $6}')"
  python3 $T /tmp/ct.*.csv 2>/dev/null | tail -n +3 | grep -E "period|skew|last|turnaround" | tr -s ' ' | tr '\n' ';'; echo
}
for rep in 1 2; do
  one "2 procs memop" x=1 --procs 2 --min 1K --max 1K --iters 2000
  one "2 procs kernel" CONCCL_STREAM_WAITS=kernel --procs 2 --min 1K --max 1K --iters 500
done
one "one process 2 ranks memop" x=1 --ranks 2 --min 1K --max 64K --iters 1000
one "one process 2 ranks kernel" CONCCL_STREAM_WAITS=kernel --ranks 2 --min 1K --max 64K --iters 1000
nv_mps_on
for rep in 1 2; do
  one "MPS 2 procs memop" x=1 --procs 2 --min 1K --max 64K --iters 2000
  one "MPS 2 procs kernel" CONCCL_STREAM_WAITS=kernel --procs 2 --min 1K --max 64K --iters 2000
done
one "MPS 4 procs memop" x=1 --procs 4 --min 1K --max 64K --iters 2000
one "MPS 4 procs kernel" CONCCL_STREAM_WAITS=kernel --procs 4 --min 1K --max 64K --iters 2000
one "MPS 8 procs memop" x=1 --procs 8 --min 1K --max 1K --iters 1000
one "MPS 8 procs kernel" CONCCL_STREAM_WAITS=kernel --procs 8 --min 1K --max 1K --iters 1000
timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g1.log 2>&1; echo "MPS graph memop rc=$?"; grep -E '^ +1024 ' $OUT/g1.log
CONCCL_STREAM_WAITS=kernel timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g2.log 2>&1; echo "MPS graph kernel rc=$?"; grep -E '^ +1024 ' $OUT/g2.log
nv_mps_off
echo "$summary"
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
