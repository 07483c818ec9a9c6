#!/bin/bash
# tools/bench/nv_large_ab.sh - on the GPU machine (device tool): issue #28's
# large-message aim in one lease. All-gather and all-to-all with N loopback
# ranks on the one GPU (sdma-probe <op> --backend nv --ranks N), each in two
# forms, beside the striped p2p of the same run:
#   whole    copies placed whole by weighted round robin (the default)
#   stripe   every copy of at least STRIPE bytes (4M) split over all engines
#            by weight (CONCCL_STRIPE_MIN_BYTES, docs/collectives.md)
# The rate compared is what the engines move: ranks x size / time for the
# all-gather (every rank's chunk into every rank, out of place) and the
# all-to-all, the message / time for the p2p. Aim: >= 90 % of the p2p's.
# Prints one table last; JSON and logs in $OUT/large_ab. RANKS ("2 4 8"),
# MIN (64M), MAX (256M), ITERS (5), STRIPE (4M), OPS ("allgather alltoall").
set -uo pipefail
. "$(dirname "$0")/nv_build_common.sh"  # OUT, B and the nv_* steps
L=$OUT/large_ab; mkdir -p $L
t0=$(date +%s)
[ -f $B/build.ninja ] || nv_configure_lib $L/cfg.log  # a build of an earlier script in this lease is reused
nv_build sdma-probe
nv_build_time
P=$B/tools/sdma-probe/sdma-probe
sweep() {  # name, env, sdma-probe args...
  local name=$1 form_env=$2; shift 2
  env $form_env timeout 120 $P "$@" --backend nv --min ${MIN:-64M} --max ${MAX:-256M} -f 2 -n ${ITERS:-5} -w 1 \
    --json-file $L/$name.json > $L/$name.log 2>&1
  echo "$name: rc=$?"
}
sweep p2p_striped "X=1" p2p --variant striped --ranks 2
for n in ${RANKS:-2 4 8}; do
  for op in ${OPS:-allgather alltoall}; do
    sweep ${op}_${n}_whole "CONCCL_STRIPE_MIN_BYTES=0" $op --ranks $n
    sweep ${op}_${n}_stripe "CONCCL_STRIPE_MIN_BYTES=${STRIPE:-4M}" $op --ranks $n
  done
done
sweep p2p_striped_after "X=1" p2p --variant striped --ranks 2
python3 - "$L" <<'PY'
import glob, json, os, sys
L = sys.argv[1]
def rows(name):
    try:
        d = json.load(open(os.path.join(L, name + ".json")))
    except Exception:
        return {}
    out = {}
    for r in d["rows"]:
        if r.get("time_us"):
            moved = r["size"] * (1 if d["op"] == "p2p" else d["ranks"])
            out[r["size"]] = (moved / r["time_us"] / 1e3, r.get("wrong_bytes", 0), r.get("engines"))
    return out
p2p = rows("p2p_striped")
p2p_after = rows("p2p_striped_after")
print("engines' GB/s (bytes moved / time); % of the striped p2p at that size (the better of its two runs)")
print("%-10s %5s %8s %10s %6s %10s %6s %8s" % ("op", "ranks", "MiB", "whole", "%", "stripe", "%", "wrong"))
for f in sorted(glob.glob(os.path.join(L, "*_whole.json"))):
    base = os.path.basename(f)[:-len("_whole.json")]
    op, n = base.rsplit("_", 1)
    w, s = rows(base + "_whole"), rows(base + "_stripe")
    for size in sorted(w):
        ref = max(p2p.get(size, (0,))[0], p2p_after.get(size, (0,))[0]) or float("nan")
        sw = s.get(size, (float("nan"), 0, None))
        print("%-10s %5s %8d %10.1f %6.1f %10.1f %6.1f %8d" % (op, n, size >> 20, w[size][0], 100 * w[size][0] / ref,
              sw[0], 100 * sw[0] / ref, w[size][1] + sw[1]))
for size in sorted(p2p):
    print("p2p striped %d MiB: %.1f GB/s, again after: %.1f" % (size >> 20, p2p[size][0], p2p_after.get(size, (float("nan"),))[0]))
PY
