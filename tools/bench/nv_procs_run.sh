#!/bin/bash
# tools/bench/nv_procs_run.sh - on a GPU machine (through the device tool; see
# docs/perf/h200.md "How to run"): collectives with one process per rank on
# the copy engines (sdma-probe <op> --backend nv --procs N), against the same
# sweep with every rank in one process (--ranks N), and a rank killed with
# SIGKILL in mid-run; first `sdma-probe selftest --backend nv` (SELFTEST=0
# skips it). Logs in $OUT (procs.jsonl, selftest.json, run.log); a summary last.
#   PROCS="2 4"            process counts
#   OPS="allgather alltoall"
#   MAX=1G                 largest size (per rank chunk x ranks for these ops)
#   C3F=1                  also tools/bench/nv_c3_factors.py (C3 with PyTorch, one factor at a time)
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}
mkdir -p "$OUT"
B=/tmp/nvb
P=$B/tools/sdma-probe/sdma-probe
{
  echo "== machine"
  uname -r; head -1 /proc/driver/nvidia/version
  nvidia-smi -L 2>&1 | head -2
  echo "== configure + build"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_BUILD_TESTS=OFF -DCONCCL_BUILD_BENCHMARKS=OFF \
    > $OUT/configure.log 2>&1 || { echo "configure failed"; tail -30 $OUT/configure.log; }
  t0=$(date +%s)
  ninja -C $B sdma-probe conccl_shared 2>&1 | grep -E "error|warning: |FAILED" | head -40
  echo "build: $(( $(date +%s) - t0 )) s"
  if [ "${SELFTEST:-1}" = 1 ]; then
    echo "== sdma-probe selftest --backend nv"
    timeout 300 $P selftest --backend nv --json > $OUT/selftest.json 2> /tmp/st.err
    echo "selftest rc=$?"; head -c 1500 /tmp/st.err
    timeout 300 $P selftest --backend nv 2>&1 | tail -15
  fi
  : > $OUT/procs.jsonl
  for N in ${PROCS:-2 4}; do
    for op in ${OPS:-allgather alltoall}; do
      for spec in ${MODES:-procs:cuda procs:device ranks:device}; do
        mode=${spec%%:*}; bufs=${spec#*:}
        t0=$(date +%s%N)
        timeout 400 $P $op --backend nv --$mode $N --buffers $bufs --min 1K --max ${MAX:-1G} --step-factor 4 \
          --timeout-ms 60000 --json /tmp/p.json > /tmp/p.txt 2> /tmp/p.err
        rc=$?
        [ -f /tmp/p.json ] && { tr -d '\n' < /tmp/p.json | sed "s/^{/{\"mode\": \"$mode\", \"buffers\": \"$bufs\", /"; echo; } >> $OUT/procs.jsonl
        rm -f /tmp/p.json
        printf "%-9s --%-5s %d --buffers %-6s rc=%d %6d ms\n" $op $mode $N $bufs $rc $(( ($(date +%s%N) - t0) / 1000000 ))
        [ $rc -ne 0 ] && head -c 1500 /tmp/p.err
      done
    done
  done
  echo "== kill -9 of rank 2 of 4 in mid-run (allgather 1 GiB, 3000 iterations, --timeout-ms 20000)"
  t0=$(date +%s%N)
  $P allgather --backend nv --procs 4 --min 1G --max 1G --iters 3000 --timeout-ms 20000 > /tmp/k.txt 2> /tmp/k.err &
  launcher=$!
  sleep 8
  victim=$(pgrep -f -- "--rank 2 --unique-id" | head -1)
  echo "killing pid ${victim:-none}"
  [ -n "$victim" ] && kill -9 $victim
  tk=$(date +%s%N)
  wait $launcher
  rc=$?
  echo "launcher rc=$rc, $(( ($(date +%s%N) - tk) / 1000000 )) ms after the kill"
  grep -o "rank 2 (pid [0-9]*) has left[^;]*" /tmp/k.err | sort | uniq -c | head
  echo "ranks still running: $(pgrep -fc -- '--unique-id' || true)"
  cp /tmp/k.err $OUT/kill.err
  if [ "${C3F:-0}" = 1 ]; then
    echo "== C3 factors (tools/bench/nv_c3_factors.py ${C3F_ARGS:-4 64})"
    CONCCL_LIBRARY=$(ls $B/src/libconccl.so.0) PYTHONPATH=python TORCH_WATCHDOG_S=280 timeout 300 \
      python3 tools/bench/nv_c3_factors.py ${C3F_ARGS:-4 64} $OUT/c3_factors.json > $OUT/c3_factors.log 2>&1
    echo "c3 factors rc=$?"; tail -12 $OUT/c3_factors.log
  fi
  echo "== summary (busbw GB/s: one process per rank from CUDA / device buffers, and all ranks in one process)"
  python3 - "$OUT/procs.jsonl" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in runs:
    by[(r["op"], r["ranks"], r["mode"], r.get("buffers", "device"))] = {row["size"]: row for row in r["rows"]}
print("%-9s %2s %10s %13s %13s %13s %s" % ("op", "N", "size", "procs+cuda", "procs+device", "1 process", "verified"))
for (op, n) in sorted({(k[0], k[1]) for k in by}):
    cols = [by.get((op, n, "procs", "cuda"), {}), by.get((op, n, "procs", "device"), {}), by.get((op, n, "ranks", "device"), {})]
    for size in sorted(set().union(*[set(c) for c in cols])):
        if size < (1 << 20): continue
        rows = [c.get(size) for c in cols]
        ok = all(r["verified"] for r in rows if r)
        print("%-9s %2d %10d %13s %13s %13s %s" % (op, n, size, *["%.1f" % r["busbw_gbps"] if r else "-" for r in rows], ok))
EOF
} 2>&1 | tee $OUT/run.log | tail -60
