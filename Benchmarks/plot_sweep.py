#!/usr/bin/env python3
"""Draws compare.sh's concurrency sweep: federations/s against concurrency, one line per client.

    Benchmarks/compare.sh | tail -n 1 > result.json
    python3 Benchmarks/plot_sweep.py result.json docs/images/concurrency-sweep.svg

Reads the "sweep" object of the JSON line compare.sh prints last; needs matplotlib
(`python3 -m pip install matplotlib`).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

CLIENTS = [
    ("broker", "IdentityBroker", "o-"),
    ("floor", "curl --parallel (floor: no parsing)", "s--"),
    ("urlsession", "URLSession + JSONDecoder", "^-"),
    ("boto3", "boto3 + threads", "v-"),
]


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: plot_sweep.py RESULT.json OUT.svg|OUT.png")
    with open(sys.argv[1]) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    result = json.loads(lines[-1])
    sweep = result.get("sweep")
    if not sweep:
        sys.exit("no \"sweep\" object in the JSON: run compare.sh without ONLY_POSTGRES/ONLY_STARTUP")
    levels = sweep["concurrency"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for key, label, style in CLIENTS:
        if key in sweep:
            ax.plot(levels, sweep[key], style, label=label, linewidth=1.6, markersize=5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.set_xlabel("federations in flight (concurrency)")
    ax.set_ylabel("federations/s (2 requests each)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"Canned Cognito (nginx, loopback), {result.get('cpus', '?')} CPUs, "
                 f"{result.get('federations', '?')} federations per run")
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
