# run 66: what separate processes cost a stream-ordered call (issues #25, #28): the same all-gather
# with every rank in one process on one stream (--ranks), as threads of one process each with its own
# stream (--threads: one CUDA context), and as forked processes; then 2 processes' large all-gathers
# with the 2-rank striping default beside one process's.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench sdma-probe
nv_build_time
W=$B/tools/bench/nv_window_bench
row() {  # name log: the 1K, 8K and 64K rows' us per call and host us
  echo "$1 rc=$2: $(grep -E '^ +(1024|8192|65536) ' $OUT/$3 | awk '{printf "%s:%s(h%s,w%s) ", $1/1024 "K", $2, $3, $6}')"
}
run() {  # name log args...
  local name=$1 log=$2; shift 2
  timeout 60 "$@" > $OUT/$log 2>&1; row "$name" $? $log
}
for rep in 1 2; do
  run "one process, 2 ranks, stream" r2_$rep.log $W --ranks 2 --min 1K --max 64K --iters 1000
  run "2 threads, stream" t2_$rep.log $W --procs 2 --threads --min 1K --max 64K --iters 1000
  run "2 procs, stream" p2_$rep.log $W --procs 2 --min 1K --max 64K --iters 1000
  run "2 threads, host" t2h_$rep.log $W --procs 2 --threads --host --min 1K --max 64K --iters 1000
  run "2 procs, host" p2h_$rep.log $W --procs 2 --host --min 1K --max 64K --iters 1000
done
run "one process, 4 ranks, stream" r4.log $W --ranks 4 --min 1K --max 64K --iters 1000
run "4 threads, stream" t4.log $W --procs 4 --threads --min 1K --max 64K --iters 1000
run "4 procs, stream" p4.log $W --procs 4 --min 1K --max 64K --iters 1000
run "one process, 8 ranks, stream" r8.log $W --ranks 8 --min 1K --max 64K --iters 1000
run "8 threads, stream" t8.log $W --procs 8 --threads --min 1K --max 64K --iters 1000
timeout 60 $B/tools/sdma-probe/sdma-probe allgather --backend nv --ranks 2 --min 1K --max 64K -f 8 -n 1000 -w 50 > $OUT/sp2.log 2>&1
echo "sdma-probe one process 2 ranks host-ordered rc=$?: $(grep -E '^ +(1024|8192|65536) ' $OUT/sp2.log | awk '{printf "%s:%s ", $1/2048 "K", $7}')"
# large: 2 processes against one process (stream and host-ordered), 16-128 MiB per rank
timeout 120 $W --procs 2 --min 16M --max 128M --iters 20 > $OUT/wl.log 2>&1
echo "large, 2 procs, stream rc=$?"; grep -E "^ +[0-9]+ " $OUT/wl.log | awk '{print "   chunk", $1/1048576, "MiB:", $2, "us"}'
timeout 120 $W --ranks 2 --min 16M --max 128M --iters 20 > $OUT/rl.log 2>&1
echo "large, one process 2 ranks, stream rc=$?"; grep -E "^ +[0-9]+ " $OUT/rl.log | awk '{print "   chunk", $1/1048576, "MiB:", $2, "us"}'
timeout 120 $B/tools/sdma-probe/sdma-probe allgather --backend nv --ranks 2 --min 32M --max 256M -f 2 -n 20 -w 3 > $OUT/ag.log 2>&1
echo "large, one process 2 ranks, host (sdma-probe) rc=$?"; grep -E "^ +[0-9]+ " $OUT/ag.log | awk '{print "   chunk", $1/2097152, "MiB:", $7, "us"}'
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
