#!/usr/bin/python3
"""Tessera's benchmark: every workload on every system, interleaved, on
identical inputs, in one run.

Systems: Tessera's Plan executor, Tessera's two-layer executor, ONNX Runtime
1.20 (npm onnxruntime-node, 2 intra-op threads, all graph optimizations) and
PyTorch (Debian, 2 threads). Each round runs every system for a batch of
iterations after a warm-up; rounds repeat, and medians are taken over all
timed iterations. Prints a table of medians and ratios to ONNX Runtime and
writes bench/RESULTS.md with the machine and date.

Usage: /usr/bin/python3 bench/run_bench.py [--rounds N] [--iters N]
           [--only W,...] [--quick] [--out bench/RESULTS.md]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_zoo  # noqa: E402

SCHEDULING = ("add_chain", "add_chains8")  # microbenchmarks of scheduling overhead
TARGETS = {  # the targeted median time as a ratio to ONNX Runtime
    "add_chain": 0.15, "add_chains8": 0.15, "bert_tiny": 0.5, "lstm_tc": 0.8, "nasnet_like": 0.7,
    "resnet18": 1.0, "mobilenet_v2": 1.0,
}
# Where a workload's floors (FLOPs over peak, bytes over bandwidth) are
# worked out, cited under the table when its target is missed.
FLOORS = {
    "lstm_tc": "docs/architecture.md, section \"Lowering recurrent layers\"",
}
WORKLOADS = ["add_chain", "add_chains8", "bert_tiny", "lstm_tc", "nasnet_like", "resnet18", "mobilenet_v2"]
UNSEEN = ["squeezenet1_0", "shufflenet_v2_x1_0", "mnasnet0_5", "efficientnet_b0", "regnet_x_400mf",
          "transformer_encoder", "gru_bidirectional", "char_lm", "unet_tiny"]


def make_overhead_model(path, n=10000):
    """A chain of n Adds on a single float, each with its own constant: n
    trivial rTasks, to measure per-rTask overhead."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        c = f"c{i}"
        inits.append(numpy_helper.from_array(np.array([1e-4 * (i % 97)], np.float32), c))
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, c], [out]))
        prev = out
    g = helper.make_graph(nodes, "overhead", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def overhead(tessera, tmp, threads, rounds, iters):
    """ns per rTask on a 10 000-rTask chain, plan and two-layer."""
    model = os.path.join(tmp, "chain10k.onnx")
    make_overhead_model(model)
    npz = os.path.join(tmp, "chain10k.inputs.npz")
    np.savez(npz, x=np.ones(1, np.float32))
    out = {}
    for ex in ("plan", "two-layer"):
        ms = []
        for _ in range(rounds):  # unfused: 10 000 rTasks, not one fused chain
            ms += tessera_times(tessera, model, npz, iters, 3, ex, threads, ["--no-fuse"])
        out[ex] = statistics.median(ms) * 1e6 / 10000
    return out


def tessera_times(tessera, model, inputs_npz, iters, warmup, executor, threads, extra=()):
    out = subprocess.run([tessera, "run", model, "--input", inputs_npz, "--iters", str(iters), "--warmup",
                          str(warmup), "--threads", str(threads), "--executor", executor, "--json", "--quiet",
                          *extra],
                         check=True, capture_output=True, text=True)
    return [r["compute_ms"] for r in json.loads(out.stdout)["runs"]]


def ort_times(node_dir, model, input_dir, iters, warmup, threads):
    env = dict(os.environ, NODE_PATH=os.path.join(node_dir, "node_modules"))
    out = subprocess.run(["node", os.path.join(HERE, "models", "ort_run.js"), model, input_dir, str(iters),
                          str(warmup), str(threads)], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)["ms"]


class Torch:
    """The PyTorch model a zoo entry was exported from, kept in memory."""

    def __init__(self, name, threads):
        import torch
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        catalog = {**make_zoo.MODELS, **make_zoo.EXTRA}
        self.model, _, _ = catalog[name]()
        make_zoo.randomize_norms(self.model, torch.Generator().manual_seed(1))
        self.model.eval()
        self.torch = torch

    def times(self, inputs, iters, warmup):
        args = tuple(self.torch.from_numpy(v) for v in inputs)
        ms = []
        with self.torch.no_grad():
            for i in range(warmup + iters):
                t0 = time.perf_counter()
                self.model(*args)
                if i >= warmup:
                    ms.append((time.perf_counter() - t0) * 1e3)
        return ms


def write_inputs(npz_path, names, out_dir):
    data = np.load(npz_path)
    manifest = []
    for i, n in enumerate(names):
        a = np.ascontiguousarray(data[n])
        a.tofile(os.path.join(out_dir, f"{i}.bin"))
        manifest.append({"name": n, "dtype": str(a.dtype) if a.dtype != np.bool_ else "bool", "shape": list(a.shape)})
    with open(os.path.join(out_dir, "inputs.json"), "w") as f:
        json.dump(manifest, f)
    return [data[n] for n in names]


def input_names(onnx_path):
    import onnx
    m = onnx.load(onnx_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--node-dir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per system per round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--unseen", action="store_true", help="also the unseen-kind models (geometric mean)")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 5 iterations: a smoke test, not a measurement")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.iters = 2, 5
    tessera = os.path.join(a.build, "bin", "tessera")
    if not os.path.isdir(os.path.join(a.node_dir, "node_modules", "onnxruntime-node")):
        print(f"bench: onnxruntime-node is not installed under {a.node_dir}: run `make bench-deps` "
              "(or `make bench`, which installs it)", file=sys.stderr)
        return 2
    if not os.path.exists(tessera):
        print(f"bench: {tessera} is missing: run `make build`", file=sys.stderr)
        return 2
    names = [w for w in a.only.split(",") if w] or WORKLOADS + (UNSEEN if a.unseen else [])
    systems = ["tessera-plan", "tessera-two-layer", "onnxruntime", "pytorch"]
    results = {}
    unfused = {}
    tmp = tempfile.mkdtemp(prefix="tessera-bench-")
    for w in names:
        zoo = os.path.join(a.build, "zoo" if w in make_zoo.MODELS else "zoo-extra")
        model, npz = os.path.join(zoo, w + ".onnx"), os.path.join(zoo, w + ".inputs.npz")
        if not os.path.exists(model):
            print(f"bench: {model} is missing: run `make zoo`", file=sys.stderr)
            return 2
        in_dir = os.path.join(tmp, w)
        os.makedirs(in_dir)
        arrays = write_inputs(npz, input_names(model), in_dir)
        torch_model = Torch(w, a.threads)
        times = {s: [] for s in systems}
        warm = max(2, a.iters // 4)
        for r in range(a.rounds):
            print(f"bench: {w} round {r + 1}/{a.rounds}", file=sys.stderr)
            times["tessera-plan"] += tessera_times(tessera, model, npz, a.iters, warm, "plan", a.threads)
            times["onnxruntime"] += ort_times(a.node_dir, model, in_dir, a.iters, warm, a.threads)
            times["tessera-two-layer"] += tessera_times(tessera, model, npz, a.iters, warm, "two-layer", a.threads)
            times["pytorch"] += torch_model.times(arrays, a.iters, warm)
            if w in SCHEDULING:  # the same chains with fusion off: scheduling alone
                unfused.setdefault(w, []).extend(
                    tessera_times(tessera, model, npz, a.iters, warm, "plan", a.threads, ["--no-fuse"]))
        results[w] = {s: statistics.median(v) for s, v in times.items()}

    # Report.
    lines = []
    header = f"| workload | {' | '.join(s + ' (ms)' for s in systems)} | plan / ORT | two-layer / ORT | PyTorch / ORT | target |"
    lines.append(header)
    lines.append("|" + "---|" * (len(systems) + 5))
    geo = []
    for w, r in results.items():
        ort = r["onnxruntime"]
        ratio = r["tessera-plan"] / ort
        if w in UNSEEN:
            geo.append(ratio)
        target = TARGETS.get(w)
        verdict = "" if target is None else (f"≤ {target} {'met' if ratio <= target else 'MISSED'}")
        lines.append(f"| {w} | " + " | ".join(f"{r[s]:.3f}" for s in systems) +
                     f" | {ratio:.3f} | {r['tessera-two-layer'] / ort:.3f} | {r['pytorch'] / ort:.3f} | {verdict} |")
    summary = ""
    missed = [w for w, r in results.items()
              if w in TARGETS and r["tessera-plan"] / r["onnxruntime"] > TARGETS[w]]
    for w in missed:
        where = FLOORS.get(w, "none written down")
        summary += f"\nMissed: {w}; its floors and where its time goes: {where}.\n"
    if geo:
        gm = float(np.exp(np.mean(np.log(geo))))
        summary = (f"\nUnseen models: geometric mean of plan/ORT {gm:.3f} (target ≤ 0.8), worst {max(geo):.3f} "
                   f"(target ≤ 1.25).\n")
    if unfused:
        summary += ("\nThe Add chains fuse into chains of TesseraFusedElementwise (up to 7 Adds each); with fusion "
                    "off (`--no-fuse`), scheduling every Add as its own op: " +
                    ", ".join(f"{w} {statistics.median(v):.3f} ms, plan/ORT "
                              f"{statistics.median(v) / results[w]['onnxruntime']:.3f}" for w, v in unfused.items()) +
                    ".\n")
    ov = overhead(tessera, tmp, a.threads, a.rounds, a.iters)
    summary += (f"\nPer-rTask overhead on a chain of 10 000 trivial rTasks (one Add of one float each): "
                f"plan executor {ov['plan']:.1f} ns, two-layer {ov['two-layer']:.1f} ns (target ≤ 50 ns).\n")
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            info = {}
            for l in f:
                if not l.strip():
                    break  # the first processor's fields
                k, _, v = l.partition(":")
                info[k.strip()] = v.strip()
        cpu = (f"{info.get('model name', 'unknown')} (family {info.get('cpu family', '?')}, "
               f"model {info.get('model', '?')})")
    except OSError:
        pass
    # The instruction set Tessera's kernels were built for (the second line
    # of `tessera --version`), so that results from hosts of different
    # kinds are not mistaken for one another.
    version = subprocess.run([tessera, "--version"], capture_output=True, text=True).stdout.splitlines()
    cpu += f", Tessera's {version[1]}" if len(version) > 1 else ""
    table = "\n".join(lines)
    print(table + summary)
    with open(a.out, "w") as f:
        f.write(f"# Benchmark results\n\nMeasured {datetime.date.today().isoformat()} on {cpu}, "
                f"{os.cpu_count()} vCPUs, {platform.platform()}; {a.threads} threads for every system; "
                f"{a.rounds} interleaved rounds x {a.iters} timed iterations each; medians of compute time "
                f"(inputs already bound). Regenerate with `make bench`.\n\n{table}\n{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
