#!/usr/bin/env python3
"""tools/bench/keeper_trace.py - lines up the replays of several processes'
keepers from their CONCCL_KEEPER_TRACE files (src/collectives/replay_keeper.hpp):

    CONCCL_KEEPER_TRACE=/tmp/kt nv_window_bench --procs 2 --graph --min 1K --max 1K
    python3 tools/bench/keeper_trace.py /tmp/kt.*.csv

Per process, the capture with the most replays (the timed one), and per
replay: the period between ticks seen, tick seen to armed (the keeper
putting the lists in), armed to ended (the lists and every rank's part),
ended to the next tick seen (the stream's side); and, across processes, how
far each rank's tick of replay r is from the first rank's. Medians and the
10th / 90th percentiles, in microseconds."""
import csv
import sys


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")


def load(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            rows.setdefault(r["capture"], {})[int(r["replay"])] = (
                int(r["tick_seen_ns"]), int(r["armed_ns"]), int(r["ended_ns"]))
    return max(rows.values(), key=len) if rows else {}


def show(name, v):
    print(f"  {name:<34} {pct(v, 0.5):9.2f} {pct(v, 0.1):9.2f} {pct(v, 0.9):9.2f}")


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    traces = [load(p) for p in paths]
    for path, t in zip(paths, traces):
        rs = sorted(r for r, (s, a, e) in t.items() if s and a and e)
        print(f"{path}: {len(rs)} complete replays (us: median, p10, p90)")
        show("tick to tick", [(t[r + 1][0] - t[r][0]) / 1e3 for r in rs if r + 1 in t and t[r + 1][0]])
        show("tick seen -> armed", [(t[r][1] - t[r][0]) / 1e3 for r in rs])
        show("armed -> ended", [(t[r][2] - t[r][1]) / 1e3 for r in rs])
        show("ended -> next tick seen", [(t[r + 1][0] - t[r][2]) / 1e3 for r in rs if r + 1 in t and t[r + 1][0]])
    if len(traces) > 1:
        first = traces[0]
        for path, t in zip(paths[1:], traces[1:]):
            common = [r for r in first if r in t and first[r][0] and t[r][0]]
            print(f"{path} against {paths[0]}, {len(common)} replays (us)")
            show("its tick seen - the first's", [(t[r][0] - first[r][0]) / 1e3 for r in common])
            show("its end - the first's", [(t[r][2] - first[r][2]) / 1e3 for r in common if t[r][2] and first[r][2]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
