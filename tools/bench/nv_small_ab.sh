#!/bin/bash
# tools/bench/nv_small_ab.sh - on the GPU machine (device tool, carry .nvdev),
# issue #28's small-message A/B in one lease: every form of the command
# lists, one after another on the same GPU, for
#   - all-gather with N loopback ranks in one process
#     (sdma-probe allgather --backend nv --ranks N), and
#   - one process per rank through windows, ordered on a CUDA stream
#     (tools/bench/nv_window_bench --procs N).
# Forms (the diagnostics of docs/collectives.md):
#   before   CONCCL_BATCH_ARRIVALS=0 CONCCL_SPREAD_SMALL=0 CONCCL_OVERLAP_COPIES=0
#            (an arrival after each copy, engines by weight, each copy
#            waiting for the one before: the lists before run 36)
#   batch    arrivals after the copies only
#   spread   and small plans spread over the engines
#   separate and a list's copies alongside each other, every list its own
#            submission (the default until the lists of a queue were joined)
#   now      and the lists of one queue joined into one submission (the default)
#   fold     now, and each copy carries its destination's arrival (the
#            copy engine adds as the copy ends: CONCCL_FOLD_ARRIVALS=1)
#   ceadd    fold, and every other add the copy engine's own semaphore
#            reduction instead of the host's add after a wait for idle
#            (CONCCL_NV_CE_ADD=1)
#   hold     ceadd, and the lists' waits for their trigger or every rank's
#            "posted" keep their engine instead of switching out
#            (CONCCL_HOLD_TRIGGERS=1)
#   gated    and a stream-ordered window call's lists held until every rank
#            has posted it (CONCCL_GATED_SUBMIT=1; one process per rank only,
#            so this form has no one-process rows)
# Prints one table (µs per call by chunk per rank, the best of REPS runs)
# and packs the JSON and logs of every run into $OUT/small_ab.tgz. RANKS,
# PROCS, FORMS, MAX, REPS override the defaults.
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb
if [ ! -f /tmp/gtest/lib/libgtest.a ]; then
  cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install > /tmp/gt.log 2>&1
fi
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest > /tmp/cfg.log 2>&1
ninja -C $B sdma-probe nv_window_bench ${EXTRA_TARGETS:-} 2>&1 | grep -E "error|warning: " | head
P=$B/tools/sdma-probe/sdma-probe; W=$B/tools/bench/nv_window_bench
MAX=${MAX:-1M}
form_env() {
  case $1 in
    before) echo "CONCCL_BATCH_ARRIVALS=0 CONCCL_SPREAD_SMALL=0 CONCCL_OVERLAP_COPIES=0 CONCCL_JOIN_LISTS=0" ;;
    batch) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=0 CONCCL_OVERLAP_COPIES=0 CONCCL_JOIN_LISTS=0" ;;
    spread) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=0 CONCCL_JOIN_LISTS=0" ;;
    separate) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=1 CONCCL_JOIN_LISTS=0" ;;
    now) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=1 CONCCL_JOIN_LISTS=1 CONCCL_GATED_SUBMIT=0" ;;
    fold) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=1 CONCCL_JOIN_LISTS=1 CONCCL_GATED_SUBMIT=0 CONCCL_FOLD_ARRIVALS=1" ;;
    ceadd) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=1 CONCCL_JOIN_LISTS=1 CONCCL_GATED_SUBMIT=0 CONCCL_FOLD_ARRIVALS=1 CONCCL_NV_CE_ADD=1" ;;
    hold) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=1 CONCCL_JOIN_LISTS=1 CONCCL_GATED_SUBMIT=0 CONCCL_FOLD_ARRIVALS=1 CONCCL_NV_CE_ADD=1 CONCCL_HOLD_TRIGGERS=1" ;;
    gated) echo "CONCCL_BATCH_ARRIVALS=1 CONCCL_SPREAD_SMALL=1 CONCCL_OVERLAP_COPIES=1 CONCCL_JOIN_LISTS=1 CONCCL_GATED_SUBMIT=1" ;;
  esac
}
k() { echo $(( $(numfmt --from=iec $1) * $2 / 1024 ))K; }
L=/tmp/small_ab; rm -rf $L; mkdir -p $L
for rep in $(seq 1 ${REPS:-2}); do
  for f in ${FORMS:-before batch spread separate now}; do
    for n in ${RANKS:-2 4 8}; do
      [ "$f" = gated ] && continue  # gating is for stream-ordered calls across processes
      env $(form_env $f) timeout 120 $P allgather --backend nv --ranks $n --min $(k 1K $n) --max $(k $MAX $n) \
        --step-factor 4 --json-file $L/probe_${f}_${n}_$rep.json > $L/probe_${f}_${n}_$rep.log 2>&1 \
        || echo "probe $f $n: rc=$? $(tail -2 $L/probe_${f}_${n}_$rep.log)"
    done
    for n in ${PROCS:-2 4 8}; do
      env $(form_env $f) timeout 150 $W --procs $n --min 1K --max $MAX --json $L/window_${f}_${n}_$rep.json \
        > $L/window_${f}_${n}_$rep.log 2>&1 || echo "window $f $n: rc=$? $(tail -2 $L/window_${f}_${n}_$rep.log)"
    done
  done
done
python3 - "$L" <<'PY'
import json, glob, os, sys, collections
out = sys.argv[1]
t = collections.defaultdict(list)  # (path, n, chunk, form) -> [us]
early = {}  # (n, chunk, form) -> gates opened before every rank posted, per call (gated form)
for f in glob.glob(os.path.join(out, "*.json")):
    kind, form, n, rep = os.path.basename(f)[:-5].split("_")
    try: j = json.load(open(f))
    except Exception: continue
    for r in j.get("rows", []):
        if kind == "probe":
            if r.get("wrong_bytes"): print("WRONG", f, r["size"])
            t[("1 proc", int(n), r["size"] // int(n), form)].append(r["time_us"])
        else:
            if r.get("wrong"): print("WRONG", f, r["bytes"])
            t[("procs", int(n), r["bytes"], form)].append(r["us_per_call"])
            if r.get("gates_opened_early_per_call"):
                early[(int(n), r["bytes"], form)] = max(early.get((int(n), r["bytes"], form), 0),
                                                        r["gates_opened_early_per_call"])
forms = [f for f in ["before", "batch", "spread", "separate", "now", "fold", "ceadd", "hold", "gated"] if any(k[3] == f for k in t)]
print("%-7s %2s %9s " % ("path", "n", "chunk") + " ".join("%14s" % f for f in forms) + "   (us per call, min of reps)")
for key in sorted({k[:3] for k in t}):
    cells = []
    for f in forms:
        v = t.get(key + (f,))
        cells.append("%14.1f" % min(v) if v else "%14s" % "-")
    print("%-7s %2d %9d " % key + " ".join(cells))
for k in sorted(early):
    print("gates opened early (procs %d, chunk %d, %s): %.2f per call" % (k + (early[k],)))
PY
tar -C $L -czf $OUT/small_ab.tgz .
