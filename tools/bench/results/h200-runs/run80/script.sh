# run 80: torch groups made and destroyed again and again on CUDA (run 79 found the second
# cycle's pair heap refused: a stale import of the peer's freed heap overlapped it; the nv
# backend now drops overlapping imports), then the smoke. Logs appended to $OUT/run80.log.
. tools/bench/nv_build_common.sh
L=$OUT/run80.log
nv_python_lib $OUT/cfg.log
timeout 150 python3 tools/bench/torch_group_cycles.py --nprocs 2 --cycles 10 --json $OUT/cycles.json > /tmp/cyc.log 2>&1
echo "cycles rc=$?"; grep -vi warn /tmp/cyc.log | grep -E "^ *[0-9]|^#|Error" | cut -c1-300 | head -16
cat /tmp/cyc.log >> $L
CONCCL_BACKEND=nv timeout 120 python3 tools/bench/torch_backend_smoke.py --nprocs 2 > /tmp/smoke.log 2>&1
echo "smoke rc=$?: $(tail -1 /tmp/smoke.log)"; grep -E "^(FAIL|SKIP)" /tmp/smoke.log | cut -c1-300 | head -6; cat /tmp/smoke.log >> $L
