# run 71: the session's last code on hardware: nv_window_bench's two modes after the set-up was shared, the
# default waits (memop), kernel waits, and a wrong CONCCL_STREAM_WAITS refused with its values.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build nv_window_bench
nv_build_time
W=$B/tools/bench/nv_window_bench
row() { echo "$1 rc=$2: $(grep -E '^ +(1024|8192) ' $OUT/$3 | awk '{printf "%s:%s(h%s,w%s) ", $1/1024 "K", $2, $3, $6}')"; }
timeout 60 $W --ranks 2 --min 1K --max 8K --iters 1000 > $OUT/r2.log 2>&1; row "one process 2 ranks" $? r2.log
timeout 60 $W --procs 2 --min 1K --max 8K --iters 1000 > $OUT/p2.log 2>&1; row "2 procs" $? p2.log
CONCCL_STREAM_WAITS=kernel timeout 60 $W --ranks 2 --min 1K --max 8K --iters 1000 > $OUT/r2k.log 2>&1; row "one process 2 ranks, kernel waits" $? r2k.log
CONCCL_STREAM_WAITS=spin timeout 60 $W --procs 2 --min 1K --max 1K --iters 10 > $OUT/bad.log 2>&1; echo "bad setting rc=$?"; head -2 $OUT/bad.log
tar czf $OUT/logs.tgz -C $OUT --exclude logs.tgz . 2>/dev/null
