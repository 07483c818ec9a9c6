# run 67: where a stream-ordered window call of 2 (and 4) processes spends its 21 us (issue #25):
# CONCCL_CALL_TRACE stamps when every rank posted each call and when its counters got there.
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
  python3 $T /tmp/ct.*.csv | tail -n +2
  cp /tmp/ct.*.csv $OUT/$(echo $name | tr ' ,' '__').csv
}
for rep in 1 2; do
  one "2 procs stream $rep" "x=1" --procs 2 --min 1K --max 1K --iters 3000
  one "2 procs host $rep" "x=1" --procs 2 --host --min 1K --max 1K --iters 3000
done
one "2 procs stream held" "CONCCL_HOLD_TRIGGERS=1" --procs 2 --min 1K --max 1K --iters 3000
one "4 procs stream" "x=1" --procs 4 --min 1K --max 1K --iters 3000
nv_mps_on
one "2 procs stream MPS" "x=1" --procs 2 --min 1K --max 1K --iters 3000
one "4 procs stream MPS" "x=1" --procs 4 --min 1K --max 1K --iters 3000
nv_mps_off
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
