"""What calling Tessera from Python adds, per call: `s.run(feeds)` from Python
against `Session::run` from C++ (`tessera run --json`), on the same model,
inputs and vEU, in interleaved rounds. Each side's cost outside the run is
its wall time minus what the run accounts for itself (its breakdown:
copy-in, queue, compute, copy-out); what Python adds is the difference of
their medians. Workloads: the 1000-Add chain (a run of microseconds) and
ResNet-18 (a run of tens of milliseconds, which leaves the caches cold for
whatever the caller does next). Beside them, a do-nothing call into the
module right after a run (`s.veus`): what any Python call pays in that
state. Target: at most 5 us added per call.

Usage: /usr/bin/python3 bench/python_overhead.py [--build build] [--out FILE] [--rounds 3]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def inside_us(b):
    return 1e3 * (b["copy_in_ms"] + b.get("queue_ms", 0.0) + b["compute_ms"] + b["copy_out_ms"])


def python_block(s, feeds, calls):
    """Per call: (wall - inside) of s.run, and the wall of s.veus right after a run."""
    added, wall, noop = [], [], []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        s.run(feeds)
        t1 = time.perf_counter_ns()
        added.append((t1 - t0) / 1e3 - inside_us(s.last_breakdown))
        wall.append((t1 - t0) / 1e3)
    for _ in range(max(calls // 4, 5)):
        s.run(feeds)
        t0 = time.perf_counter_ns()
        s.veus
        noop.append((time.perf_counter_ns() - t0) / 1e3)
    return added, wall, noop


def cxx_block(tessera_bin, path, inputs, calls):
    """Per call: (wall - inside) of Session::run in `tessera run`'s loop."""
    out = subprocess.run([tessera_bin, "run", path, "--input", inputs, "--threads", "1", "--warmup", "20",
                          "--iters", str(calls), "--json", "--quiet"], check=True, capture_output=True, text=True)
    runs = json.loads(out.stdout)["runs"]
    return [1e3 * r["wall_ms"] - inside_us(r) for r in runs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--out", default="")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import tessera

    tessera.set_log_level("warning")
    zoo = os.path.join(a.build, "zoo")
    tessera_bin = os.path.join(a.build, "bin", "tessera")
    rows = []
    for name, calls in (("add_chain", 2000), ("resnet18", 80)):
        path = os.path.join(zoo, name + ".onnx")
        inputs = os.path.join(zoo, name + ".inputs.npz")
        with np.load(inputs) as z:
            feeds = {k: z[k] for k in z.files}
        s = tessera.connect().compile(path).session(veus=1)
        for _ in range(20):
            s.run(feeds)
        py, wall, noop, cxx = [], [], [], []
        for r in range(a.rounds):
            p, w, n = python_block(s, feeds, calls)
            py += p
            wall += w
            noop += n
            cxx += cxx_block(tessera_bin, path, inputs, calls)
            print(f"{name}: round {r + 1}/{a.rounds}", file=sys.stderr)
        med = statistics.median
        rows.append((name, calls * a.rounds, med(wall), med(py), med(cxx), med(py) - med(cxx), med(noop)))
    lines = [
        "| workload | calls | s.run wall (us) | outside the run: Python (us) | outside the run: C++ (us) "
        "| added by Python (us) | a do-nothing call after a run (us) | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, calls, wall, py, cxx, added, noop in rows:
        lines.append(f"| {name} | {calls} | {wall:.1f} | {py:.2f} | {cxx:.2f} | {added:.2f} | {noop:.2f} "
                     f"| <= 5 us {'met' if added <= 5 else 'MISSED'} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write("# Python call overhead\n\nMedians; 1 vEU; the host as `tessera topo` describes it.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
