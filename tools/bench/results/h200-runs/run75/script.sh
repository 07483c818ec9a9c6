# run 75: the posted word in GPU memory (CONCCL_POSTED_WORDS=device, the new default) against host memory,
# window calls of 2, 4 and 8 processes on a stream, host-ordered, and under MPS; the modes alternate.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build nv_window_bench sdma-probe
nv_build_time
W=$B/tools/bench/nv_window_bench
P=$(find $B -name sdma-probe -type f | head -1)
row() { echo "$1 rc=$2: $(grep -E '^ +(1024|8192|65536) ' $OUT/$3 | awk '{printf "%s:%s(w%s) ", $1/1024 "K", $2, $6}')"; }
for p in 2 4 8; do
  for m in device host device host; do
    CONCCL_POSTED_WORDS=$m timeout 120 $W --procs $p --min 1K --max 64K --iters 2000 > $OUT/p${p}_$m.log 2>&1
    row "$p procs stream $m" $? p${p}_$m.log; mv $OUT/p${p}_$m.log $OUT/p${p}_${m}_$RANDOM.log
  done
done
for m in device host device host; do
  CONCCL_POSTED_WORDS=$m timeout 120 $W --procs 2 --host --min 1K --max 64K --iters 2000 > $OUT/h2_$m.log 2>&1
  row "2 procs host-ordered $m" $? h2_$m.log; mv $OUT/h2_$m.log $OUT/h2_${m}_$RANDOM.log
done
CONCCL_POSTED_WORDS=device timeout 120 $W --procs 2 --graph --min 1K --max 8K --iters 500 > $OUT/g2.log 2>&1; row "2 procs graph device" $? g2.log
timeout 200 $P allreduce --backend nv --procs 2 --min 1K --max 4M -d float > $OUT/ar2.log 2>&1; echo "allreduce 2 procs rc=$?"; tail -12 $OUT/ar2.log
nv_mps_on
for p in 2 4; do
  for m in device host device host; do
    CONCCL_POSTED_WORDS=$m timeout 120 $W --procs $p --min 1K --max 64K --iters 2000 > $OUT/m${p}_$m.log 2>&1
    row "$p procs MPS $m" $? m${p}_$m.log; mv $OUT/m${p}_$m.log $OUT/m${p}_${m}_$RANDOM.log
  done
done
nv_mps_off
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
