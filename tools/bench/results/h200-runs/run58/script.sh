# run 58: the two modes are a warm-up? GPU clocks and p-state sampled while 1 KiB all-gathers and replays run after idle
. tools/bench/nv_build_common.sh
nv_configure_tests $OUT/cfg.log
nv_build sdma-probe nv_window_bench
P=$B/tools/sdma-probe/sdma-probe; W=$B/tools/bench/nv_window_bench
nvidia-smi --query-gpu=timestamp,pstate,clocks.gr,clocks.sm,clocks.mem,clocks.video,power.draw --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
mark() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" | tee -a $OUT/marks.txt; }
ag() { timeout 60 $P allgather --backend nv --ranks 2 --min 1K --max 1K -n 1000 "$@" > $OUT/ag.log 2>&1; mark "ag [$*] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/ag.log | awk '{print $7, $14}')"; }
sleep 4; mark idle
ag -w 50; ag -w 50; ag -w 50
sleep 4; mark idle
ag -w 300000
ag -w 50
sleep 4; mark idle
for i in 1 2 3; do timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g.log 2>&1; mark "graph rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g.log | head -1)"; done
sleep 4; mark idle
timeout 30 python3 -c "
import torch, time
t = time.time()
while time.time() - t < 20:
    torch.cuda._sleep(2000000); torch.cuda.synchronize()
" > $OUT/hot.log 2>&1 &
HOT=$!; sleep 3; mark "background sleep kernels running"
ag -w 50; ag -w 50
for i in 1 2 3; do timeout 60 $W --procs 2 --graph --min 1K --max 1K --iters 1000 > $OUT/g.log 2>&1; mark "graph beside load rc=$? $(grep -E '^ +[0-9]+ ' $OUT/g.log | head -1)"; done
kill $HOT 2>/dev/null; kill $SMI
echo "--- smi (every 100 ms) ---"; awk -F, '{print $1","$2","$3","$4","$5","$6","$7}' $OUT/smi.csv | cut -c12- | awk 'NR%3==1'
