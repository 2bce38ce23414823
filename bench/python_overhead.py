"""What calling Tessera from Python adds: the wall time of `s.run(feeds)` in
Python minus what the C++ run accounts for itself (its breakdown: copy-in,
queue, compute, copy-out), per call, median over many calls; for the
1000-Add chain (where the run is tiny) and ResNet-18. Target: at most 5 us
added per call. Usage: PYTHONPATH=build/python python3 bench/python_overhead.py [--build build]"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(tessera, path, feeds, calls):
    rt = tessera.connect()
    s = rt.compile(path).session(veus=1)
    for _ in range(20):
        s.run(feeds)
    added, total = [], []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        s.run(feeds)
        wall = (time.perf_counter_ns() - t0) / 1e3
        b = s.last_breakdown
        inside = 1e3 * (b["copy_in_ms"] + b["queue_ms"] + b["compute_ms"] + b["copy_out_ms"])
        added.append(wall - inside)
        total.append(wall)
    return statistics.median(added), statistics.median(total)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import tessera

    tessera.set_log_level("warning")
    zoo = os.path.join(a.build, "zoo")
    rows = []
    for name, calls in (("add_chain", 5000), ("resnet18", 200)):
        with np.load(os.path.join(zoo, name + ".inputs.npz")) as z:
            feeds = {k: z[k] for k in z.files}
        added, wall = measure(tessera, os.path.join(zoo, name + ".onnx"), feeds, calls)
        rows.append((name, calls, wall, added))
    lines = ["| workload | calls | s.run wall, median (us) | added by Python, median (us) | target |", "|---|---|---|---|---|"]
    for name, calls, wall, added in rows:
        lines.append(f"| {name} | {calls} | {wall:.1f} | {added:.2f} | <= 5 us {'met' if added <= 5 else 'MISSED'} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write("# Python call overhead\n\n" + text + "\n")


if __name__ == "__main__":
    main()
