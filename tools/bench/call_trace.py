#!/usr/bin/env python3
"""tools/bench/call_trace.py - where a window call's time goes across
processes, from a CONCCL_CALL_TRACE file (src/collectives/call_trace.hpp):

    CONCCL_CALL_TRACE=/tmp/ct nv_window_bench --procs 2 --min 1K --max 1K --iters 2000
    python3 tools/bench/call_trace.py /tmp/ct.*.csv

Per call k, with post_r = when rank r posted k, data_r = when rank r's
arrive and sent counters both reached call k's values:
  period       post of k+1 to post of k+2, the later rank's (time per call)
  post skew    the later rank's post minus the earlier's
  engines      the later post to the last rank's data (the lists' part:
               the engines seeing the posts, the copies, the arrivals)
  turnaround   per rank: its data to its post of k+1 (the stream's or the
               host's part: seeing its counters, its next post)
  first data / last data   the later post to the first and the last rank's
               data
Medians and the 10th / 90th percentiles, in microseconds; the first and
last tenth of the calls are left out (warm-up, the end)."""
import csv
import sys


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")


def main(paths):
    if not paths:
        print(__doc__)
        return 2
    for path in paths:
        with open(path) as f:
            lines = f.read().splitlines()
        notes = [l for l in lines if l.startswith("#")]
        rows = list(csv.reader(l for l in lines if not l.startswith("#")))
        head, rows = rows[0], rows[1:]
        n = (len(head) - 1) // 3
        calls = []
        for r in rows:
            if any(c == "" for c in r):
                continue
            v = [int(c) for c in r]
            posts = [v[1 + 3 * q] for q in range(n)]
            data = [max(v[2 + 3 * q], v[3 + 3 * q]) for q in range(n)]
            calls.append((v[0], posts, data))
        cut = len(calls) // 10
        calls = calls[cut:len(calls) - cut] if len(calls) > 20 else calls
        m = {"period": [], "post skew": [], "engines": [], "first data": [], "last data": []}
        for q in range(n):
            m["turnaround %d" % q] = []
        for i, (k, posts, data) in enumerate(calls):
            last = max(posts)
            m["post skew"].append(last - min(posts))
            m["engines"].append(max(data) - last)
            m["first data"].append(min(data) - last)
            m["last data"].append(max(data) - last)
            if i + 1 < len(calls) and calls[i + 1][0] == k + 1:
                for q in range(n):
                    m["turnaround %d" % q].append(calls[i + 1][1][q] - data[q])
                if i + 2 < len(calls) and calls[i + 2][0] == k + 2:
                    m["period"].append(max(calls[i + 2][1]) - max(calls[i + 1][1]))
        print("%s: %d calls, %d ranks (us: median [p10, p90])" % (path, len(calls), n))
        for l in notes:
            print("  " + l)
        for name, v in m.items():
            us = [x / 1000.0 for x in v]
            print("  %-14s %8.2f  [%6.2f, %6.2f]" % (name, pct(us, 0.5), pct(us, 0.1), pct(us, 0.9)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
