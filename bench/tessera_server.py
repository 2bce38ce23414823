#!/usr/bin/python3
"""Tessera's side of the benchmark, kept alive for a whole workload so that
its batches interleave finely with the other systems' (run_bench.py):

  tessera_server.py --build DIR MODEL INPUTS.npz [--veus N] [--executor NAME] [--no-fuse]

Compiles MODEL through the Python module and opens one session. Prints one
JSON line, {"ready": true, "plan": <the Plan's summary, as `tessera run
--json` gives it>}; then, for each line "WARMUP ITERS" on stdin, runs
WARMUP untimed and ITERS timed runs and prints {"ms": [compute time of
each timed run], "ways": "..."} (inputs already bound, as `tessera run`
reports it; per run P as placed, A alone, X exchanged: SessionOptions::adapt).
Ends with stdin."""
import argparse
import json
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("--veus", type=int, default=0)
    ap.add_argument("--executor", default="plan")
    ap.add_argument("--no-fuse", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import tessera

    feeds = dict(np.load(a.inputs))
    # Dynamic dimensions bound to the inputs' shapes, as `tessera run --input` does.
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    model = tessera.connect().compile(a.model, shapes=shapes, fuse=not a.no_fuse)
    s = model.session(veus=a.veus, executor=a.executor)
    plan = json.loads(s.plan_json()) if a.executor == "plan" else None
    print(json.dumps({"ready": True, "plan": plan}), flush=True)
    for line in sys.stdin:
        warmup, iters = (int(x) for x in line.split())
        for _ in range(warmup):
            s.run(feeds)
        ms, ways = [], []
        for _ in range(iters):
            s.run(feeds)
            b = s.last_breakdown
            ms.append(b["compute_ms"])
            ways.append("A" if b["alone"] else "X" if b["exchanged"] else "P")
        print(json.dumps({"ms": ms, "ways": "".join(ways)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
