# run 68: run 67 showed the two ranks' lists of a 2-process 1 KiB all-gather ending 4 us apart, one after
# the other: does the choice of copy engines (--engines) change that? Traced (CONCCL_CALL_TRACE), stream and host,
# and stream with held posted waits (CONCCL_HOLD_TRIGGERS=1).
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench
nv_build_time
W=$B/tools/bench/nv_window_bench
T=tools/bench/call_trace.py
one() {  # name env args...
  local name=$1 envs=$2; shift 2
  rm -f /tmp/ct.*.csv
  env $envs CONCCL_CALL_TRACE=/tmp/ct timeout 60 $W "$@" > $OUT/w.log 2>&1
  echo "== $name rc=$? : $(grep -E '^ +1024 ' $OUT/w.log | awk '{print $2, "us/call, host", $3}')"
  grep "^# engines" $OUT/w.log
  python3 $T /tmp/ct.*.csv | tail -n +2 | grep -E "longest|period|skew|first|last|turnaround"
  mkdir -p $OUT/csv; cp /tmp/ct.*.csv "$OUT/csv/$(echo $name | tr ' ,' '__').csv"
}
one "stream, rank 1 traces" CONCCL_CALL_TRACE_RANK=1 --procs 2 --min 1K --max 1K --iters 3000
timeout 60 $W --procs 2 --min 1K --max 1K --iters 3000 > $OUT/w.log 2>&1
echo "== stream, no trace rc=$? : $(grep -E '^ +1024 ' $OUT/w.log | awk '{print $2, "us/call, host", $3}')"
for eng in default 2,3 2,4 3,4 4 2; do
  E=""; [ $eng != default ] && E="--engines $eng"
  one "stream $eng" x=1 --procs 2 --min 1K --max 1K --iters 3000 $E
  one "host $eng" x=1 --procs 2 --host --min 1K --max 1K --iters 3000 $E
  one "stream held $eng" CONCCL_HOLD_TRIGGERS=1 --procs 2 --min 1K --max 1K --iters 3000 $E
done
tar czf $OUT/logs.tgz -C $OUT csv
