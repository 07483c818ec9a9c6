# run 74: nv_window_bench after time_calls was shared: both modes still run and verify.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build nv_window_bench
nv_build_time
W=$B/tools/bench/nv_window_bench
timeout 60 $W --procs 2 --min 1K --max 8K --iters 500 > $OUT/p2.log 2>&1; echo "2 procs rc=$?"; grep -E "^ +[0-9]+ " $OUT/p2.log
timeout 60 $W --ranks 2 --min 1K --max 8K --iters 500 > $OUT/r2.log 2>&1; echo "one process rc=$?"; grep -E "^ +[0-9]+ " $OUT/r2.log
