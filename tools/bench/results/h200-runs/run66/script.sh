# run 66: 2 processes' large all-gathers with the new 2-rank striping default, beside one process's (issue #25's 1.2x)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench sdma-probe
timeout 120 $B/tools/bench/nv_window_bench --procs 2 --min 16M --max 128M --iters 20 > $OUT/w.log 2>&1
echo "procs 2 rc=$?"; grep -E "^ +[0-9]+ " $OUT/w.log | awk '{print "   chunk", $1/1048576, "MiB:", $2, "us"}'
timeout 120 $B/tools/sdma-probe/sdma-probe allgather --backend nv --ranks 2 --min 32M --max 256M -f 2 -n 20 -w 3 > $OUT/ag.log 2>&1
echo "one process 2 ranks rc=$?"; grep -E "^ +[0-9]+ " $OUT/ag.log | awk '{print "   chunk", $1/2097152, "MiB:", $7, "us"}'
