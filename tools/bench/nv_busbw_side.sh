#!/bin/bash
# tools/bench/nv_busbw_side.sh - on the GPU machine (device tool): issue #26's
# aim side by side in one lease: busbw of all-gather, reduce-scatter and
# all-reduce (bf16 sum) at the same sizes (nccl-tests' size: the all-gather's
# output, what one rank sends for the reductions), with N loopback ranks in
# one process and with one process per rank (--procs N, through windows).
# The reductions run with the default staging (64 MiB per rank) and with
# STAGING (1G), where a call's data fits in one piece. ITERS (5) timed calls
# per size after one warm-up, each sweep bounded by SWEEP_S (70) seconds, so
# that the whole run fits one 10-minute device call (run 36's first try, with
# nccl-tests' default iterations, did not). Prints a line per sweep and a
# table last; JSON and logs packed into $OUT/busbw.tgz. N (4), MIN (64M),
# MAX (1G), MODES ("ranks procs").
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb; L=/tmp/busbw; rm -rf $L; mkdir -p $L
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_BUILD_TESTS=OFF > $L/cfg.log 2>&1
ninja -C $B sdma-probe conccl_shared 2>&1 | grep -E "error|warning: " | head
P=$B/tools/sdma-probe/sdma-probe; N=${N:-4}
IT="-n ${ITERS:-5} -w 1"; T=${SWEEP_S:-70}
for mode in ${MODES:-ranks procs}; do
  timeout $T $P allgather --backend nv --$mode $N --min ${MIN:-64M} --max ${MAX:-1G} $IT \
    --json-file $L/allgather_${mode}_default.json > $L/allgather_${mode}_default.log 2>&1
  echo "allgather --$mode $N: rc=$?"
  for op in reducescatter allreduce; do
    for st in default ${STAGING:-1G}; do
      sf=""; [ $st != default ] && sf="--staging $st"
      timeout $T $P $op --backend nv --$mode $N -d bfloat16 -o sum --min ${MIN:-64M} --max ${MAX:-1G} $sf $IT \
        --json-file $L/${op}_${mode}_$st.json > $L/${op}_${mode}_$st.log 2>&1
      echo "$op --$mode $N staging $st: rc=$?"
    done
  done
done
python3 - $L <<'PY'
import json, glob, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    op, mode, st = os.path.basename(f)[:-5].split("_")
    try: j = json.load(open(f))
    except Exception as e: print("unreadable", f, e); continue
    for r in j["rows"]:
        w = r.get("wrong_bytes") or r.get("wrong_elements") or 0
        if w: print("WRONG", f, r["size"], w)
        rows[(mode, r["size"], op + ("" if st == "default" else "@" + st))] = (r["busbw_gbps"], r.get("variant", ""))
cols = sorted({k[2] for k in rows}, key=lambda c: (c.split("@")[0] != "allgather", c))
print("%-6s %6s " % ("mode", "MiB") + " ".join("%22s" % c for c in cols) + "   (busbw GB/s, variant)")
for mode, size in sorted({k[:2] for k in rows}):
    cells = []
    for c in cols:
        v = rows.get((mode, size, c))
        cells.append("%22s" % ("%.1f %s" % (v[0], v[1]) if v and v[0] is not None else "-"))
    print("%-6s %6d " % (mode, size >> 20) + " ".join(cells))
PY
tar -C $L -czf $OUT/busbw.tgz .
