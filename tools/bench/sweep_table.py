#!/usr/bin/env python3
"""tools/bench/sweep_table.py - Markdown tables from the JSON lines that
tools/bench/nv_coll_run.sh collects (one `sdma-probe <op> --json` document per
line): per op, variant and rank count, the time and bus bandwidth at chosen
sizes, and whether every row was verified.

    python3 tools/bench/sweep_table.py tools/bench/results/h200-runs/run14/sweeps.jsonl [--sizes 1K,64K,1M,64M,1G]
"""
import json
import sys


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def label(n):
    for u, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{u}"
    return str(n)


def main():
    args = sys.argv[1:]
    sizes = [1 << 10, 64 << 10, 1 << 20, 64 << 20, 1 << 30]
    if "--sizes" in args:
        i = args.index("--sizes")
        sizes = [parse_size(x) for x in args[i + 1].split(",")]
        del args[i:i + 2]
    docs = [json.loads(line) for line in open(args[0]) if line.strip()]
    head = "| op | variant | ranks | " + " | ".join(f"{label(s)} µs / busbw GB/s" for s in sizes) + " | rows verified |"
    print(head)
    print("|" + "---|" * (4 + len(sizes)))
    for d in docs:
        rows = {r["size"]: r for r in d["rows"]}
        cells = []
        for s in sizes:
            r = rows.get(s)
            cells.append(f"{r['time_us']:.1f} / {r['busbw_gbps']:.1f}" if r else "-")
        ok = sum(1 for r in d["rows"] if r["verified"])
        variant = d.get("variant_asked", "?")
        if variant == "auto":
            picked = sorted({r["variant"] for r in d["rows"]})
            variant = "auto (" + ",".join(picked) + ")"
        print(f"| {d['op']} | {variant} | {d['ranks']} | " + " | ".join(cells) + f" | {ok}/{len(d['rows'])} |")


if __name__ == "__main__":
    main()
