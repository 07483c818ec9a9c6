#!/bin/bash
# tools/bench/nv_tick_ab.sh - on the GPU machine (device tool, carry .nvdev):
# issue #29's two forms of a captured call's replay tick (docs/graphs.md) in
# one lease, about 4 minutes with the build:
#   1. correctness with the default form (stream stores, no kernel):
#      test_nv_local_capture (every rank in one process) and
#      examples/python/torch_graph_allgather.py on 2 and 4 processes
#      (REPLAYS replays of GEMM -> all-gather -> check, every word);
#   2. nv_window_bench --procs N --graph (every replay verified), per call
#      against per replay, for CONCCL_REPLAY_TICK=writes (the default) and
#      =kernel, and the default with closing lists on an engine
#      (CONCCL_REPLAY_CLOSE=engine, "engine" rows), without and with CUDA MPS.
# PROCS ("2 4"), GRAPH_MAX (1K), ITERS (300), REPLAYS (1000). Logs and JSON in
# $OUT; a table last.
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench test_nv_local_capture
nv_build_time
summary=""
nv_run_test backends/nv/test_nv_local_capture 200 40
nv_python_env
for n in ${PROCS:-2 4}; do
  log=$OUT/example_$n.log
  timeout 200 python3 examples/python/torch_graph_allgather.py $n ${REPLAYS:-1000} > $log 2>&1
  line="torch_graph_allgather.py $n procs: rc=$? $(grep -E '^rank 0' $log | sed 's/.*check, //')"
  echo "$line"; summary+="$line"$'\n'; grep -E "WRONG|Error|error" $log | head -3 | cut -c1-300
done
W=$B/tools/bench/nv_window_bench
for mps in 0 1; do
  [ "$mps" = 1 ] && nv_mps_on
  for n in ${PROCS:-2 4}; do
    for tick in writes kernel engine; do
      f=$OUT/tick_${tick}_${n}_mps$mps
      close=keeper; [ $tick = engine ] && close=engine
      CONCCL_REPLAY_TICK=${tick/engine/writes} CONCCL_REPLAY_CLOSE=$close timeout 90 $W --procs $n --graph \
        --min 1K --max ${GRAPH_MAX:-1K} --iters ${ITERS:-300} --json $f.json > $f.log 2>&1
      echo "tick=$tick procs=$n mps=$mps: rc=$?"
    done
  done
  [ "$mps" = 1 ] && nv_mps_off
done
echo "== summary"; echo "$summary"
python3 - $OUT <<'PY'
import glob, json, os, sys
print("%-7s %5s %4s %8s %10s %12s %14s %6s" % ("tick", "procs", "mps", "bytes", "us/call", "us/replay", "host us/rep", "wrong"))
for f in sorted(glob.glob(os.path.join(sys.argv[1], "tick_*.json"))):
    _, tick, n, mps = os.path.basename(f)[:-5].split("_")
    try: rows = json.load(open(f))["rows"]
    except Exception as e: print("unreadable", f, e); continue
    for r in rows:
        print("%-7s %5s %4s %8d %10.1f %12.1f %14.2f %6d" % (tick, n, mps[3:], r["bytes"], r["us_per_call"],
              r.get("us_per_replay", -1), r.get("host_us_per_replay", -1), r["wrong"]))
PY
