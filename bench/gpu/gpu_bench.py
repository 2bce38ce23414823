#!/usr/bin/env python3
"""Tessera on a GPU against its controls, batch 1, on identical inputs.

For each zoo model, on one GPU, interleaved round by round:
  plan         Tessera's Plan: one persistent launch, block u walking vEU u's list
  two-layer    Tessera's control: one launch per op, replayed as a CUDA graph
  eager        PyTorch eager
  graph        PyTorch CUDA-graph replay of the eager forward
  compile      torch.compile (inductor, default mode)
Device time per run (CUDA events around the work, inputs already on the GPU,
the queue empty at the start of each run); medians and p90 over all rounds.
Correctness: every Tessera output against the model's PyTorch CPU outputs
(the zoo's .outputs.npz) by rel-L2, and the same bits over repeated runs;
PyTorch on the GPU (TF32 off) against the same.

Needs PyTorch with CUDA, NumPy, the zoo (scripts/make_zoo.py) and the
tessera-gpu-bench program (built with the CUDA backend).

Usage: gpu_bench.py --bench build/bin/tessera-gpu-bench --zoo build/zoo [--models a,b]
                    [--rounds 5] [--runs 40] [--compile-models a,b] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import make_zoo  # noqa: E402

MODELS = ["lstm_tc", "nasnet_like", "bert_tiny", "resnet18", "mlp", "add_chain", "add_chains8", "mobilenet_v2"]
TARGETS = ["lstm_tc", "nasnet_like", "resnet18", "bert_tiny"]


def rel_l2(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.sqrt(np.sum((got - want) ** 2) / max(np.sum(want ** 2), 1e-30)))


def median_p90(xs):
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(0.9 * len(xs)))]


def torch_model(name, zoo):
    """The zoo's PyTorch module with the zoo's weights (same seeds), its
    inputs from the zoo, and how far its CPU outputs are from the zoo's."""
    torch.manual_seed(0)
    model, inputs, _ = make_zoo.MODELS[name]()
    make_zoo.randomize_norms(model, torch.Generator().manual_seed(1))
    model.eval()
    ins = np.load(os.path.join(zoo, name + ".inputs.npz"))
    args = tuple(torch.from_numpy(ins[k]) for k in inputs)
    want = np.load(os.path.join(zoo, name + ".outputs.npz"))
    with torch.no_grad():
        outs = model(*args)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    keys = ["output"] if len(outs) == 1 else [f"output{i}" for i in range(len(outs))]
    cpu_rel = max(rel_l2(o.numpy(), want[k]) for o, k in zip(outs, keys))
    return model, args, want, keys, cpu_rel


def time_runs(fn, n):
    """Device ms of each of n runs, the queue empty at each start."""
    out = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


class TorchControls:
    def __init__(self, name, zoo, use_compile):
        model, args, want, keys, self.cpu_rel = torch_model(name, zoo)
        self.model = model.cuda()
        self.args = tuple(a.cuda() for a in args)
        with torch.no_grad():
            outs = self.model(*self.args)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        self.gpu_rel = max(rel_l2(o.cpu().numpy(), want[k]) for o, k in zip(outs, keys))
        self.fns = {"eager": self.eager}
        # CUDA graph of the eager forward, warmed up on a side stream.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                self.model(*self.args)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.model(*self.args)
        self.fns["graph"] = self.graph.replay
        self.compile_s = None
        if use_compile:
            t0 = time.time()
            self.compiled = torch.compile(self.model)
            with torch.no_grad():
                for _ in range(3):
                    self.compiled(*self.args)
            torch.cuda.synchronize()
            self.compile_s = time.time() - t0
            self.fns["compile"] = self.run_compiled

    def eager(self):
        with torch.no_grad():
            self.model(*self.args)

    def run_compiled(self):
        with torch.no_grad():
            self.compiled(*self.args)


def ceilings():
    """The two ceilings of METHOD.md: device-to-device copy bandwidth and an
    FP32 (TF32 off) matrix product's rate."""
    x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    t = statistics.median(time_runs(lambda: y.copy_(x), 10))
    bw = 2 * x.numel() * 4 / (t / 1e3) / 1e12
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    a @ b
    t = statistics.median(time_runs(lambda: a @ b, 5))
    tf = 2 * 8192 ** 3 / (t / 1e3) / 1e12
    del x, y, a, b
    torch.cuda.empty_cache()
    return bw, tf


def report(a, gpu, bw, tf, models, checks, controls, times, rounds_done):
    rows = []
    cols = ["plan", "two-layer", "eager", "graph", "compile"]
    lines = [f"GPU: {gpu}; copy {bw:.2f} TB/s, fp32 matmul {tf:.1f} TFLOP/s (TF32 off). "
             f"Device ms per run, median (p90), {rounds_done} rounds x {a.runs} runs, batch 1.", "",
             "| model | Tessera plan | two-layer (graph) | torch eager | torch graph | torch.compile "
             "| plan speedup vs two-layer | plan / compile | rel-L2 plan |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in models:
        med = {}
        cells = []
        for k in cols:
            if (m, k) in times:
                md, p9 = median_p90(times[(m, k)])
                med[k] = md
                cells.append(f"{md:.4f} ({p9:.4f})")
            else:
                cells.append("—")
        sp = med["two-layer"] / med["plan"] if "plan" in med and "two-layer" in med else float("nan")
        vc = med["plan"] / med["compile"] if "compile" in med and "plan" in med else float("nan")
        chk = checks[(m, "plan")]
        verdict = ("error" if "error" in chk else f"{chk['rel_l2']:.1e}" + ("" if chk["stable"] else " (UNSTABLE)"))
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {sp:.2f}x | {vc:.2f} | {verdict} |")
        rows.append({"model": m, "median_ms": med, "checks": {k: checks[(m, k)] for k in ("plan", "two-layer")},
                     "torch_gpu_rel_l2": controls[m].gpu_rel, "torch_cpu_rel_l2": controls[m].cpu_rel,
                     "compile_s": controls[m].compile_s,
                     "p90_ms": {k: median_p90(times[(m, k)])[1] for k in cols if (m, k) in times},
                     "run_ms_median": {k: statistics.median(times[(m, k + "/run")]) for k in ("plan", "two-layer")
                                       if (m, k + "/run") in times}})
    table = "\n".join(lines)
    print(table)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump({"gpu": gpu, "copy_tb_s": bw, "fp32_tflops": tf, "rows": rows,
                       "times": {f"{m}/{k}": v for (m, k), v in times.items()}}, f)
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="the tessera-gpu-bench program")
    ap.add_argument("--zoo", required=True, help="the zoo folder (scripts/make_zoo.py)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--compile-models", default=",".join(TARGETS), help="models also timed under torch.compile")
    ap.add_argument("--compile-budget-s", type=float, default=600,
                    help="no more torch.compile once this many seconds went to it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=40, help="runs of each method per round")
    ap.add_argument("--out", default=None, help="folder for results.json and table.md")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench: PyTorch sees no CUDA GPU here (it needs a GPU, its driver and PyTorch built with CUDA)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = [m for m in a.models.split(",") if m]
    models = [m for m in models if os.path.exists(os.path.join(a.zoo, m + ".onnx"))]
    compile_set = set(m for m in a.compile_models.split(",") if m)
    gpu = torch.cuda.get_device_name(0)
    bw, tf = ceilings()
    print(f"gpu_bench: {gpu}; copy {bw:.2f} TB/s (read + write), fp32 matmul {tf:.1f} TFLOP/s (TF32 off)", flush=True)

    t0 = time.time()
    proc = subprocess.Popen([a.bench, a.zoo] + models, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    checks = {}
    while len(checks) < 2 * len(models):
        line = proc.stdout.readline()
        if not line:
            sys.exit(f"gpu_bench: {a.bench} ended early (exit {proc.wait()})")
        d = json.loads(line)
        if "check" in d and "error" in d:
            checks[(d["model"], d["executor"])] = d
            print(f"gpu_bench: tessera {d['model']} {d['executor']}: {d['error']}", flush=True)
        elif "check" in d:
            checks[(d["model"], d["executor"])] = d
            print(f"gpu_bench: tessera {d['model']} {d['executor']}: rel-L2 {d['rel_l2']:.2e} "
                  f"stable {d['stable']} vEUs {d['veus']} predicted {d['predicted_us']:.1f} us", flush=True)
    print(f"gpu_bench: tessera compiled and checked {len(models)} models in {time.time() - t0:.1f} s", flush=True)

    controls = {}
    compile_spent = 0.0
    for m in models:
        t0 = time.time()
        use_compile = m in compile_set and compile_spent < a.compile_budget_s
        controls[m] = TorchControls(m, a.zoo, use_compile)
        compile_spent += controls[m].compile_s or 0.0
        c = controls[m]
        print(f"gpu_bench: torch {m}: CPU vs zoo {c.cpu_rel:.1e}, GPU vs zoo {c.gpu_rel:.1e}"
              + (f", compiled in {c.compile_s:.1f} s" if c.compile_s is not None else "")
              + f" ({time.time() - t0:.1f} s)", flush=True)

    times = {}
    for r in range(a.rounds):
        proc.stdin.write(f"round {a.runs}\n")
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                sys.exit(f"gpu_bench: {a.bench} ended in round {r + 1} (exit {proc.wait()})")
            d = json.loads(line)
            if "round_done" in d:
                break
            times.setdefault((d["model"], d["executor"]), []).extend(d["device_ms"])
            times.setdefault((d["model"], d["executor"] + "/run"), []).extend(d["run_ms"])
        for m in models:
            for k, fn in controls[m].fns.items():
                times.setdefault((m, k), []).extend(time_runs(fn, a.runs))
        print(f"gpu_bench: round {r + 1}/{a.rounds} done", flush=True)
        table = report(a, gpu, bw, tf, models, checks, controls, times, r + 1)
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    proc.wait()

    bad = [m for m in models if any("error" in checks[(m, k)] or checks[(m, k)]["rel_l2"] > 1e-4
                                    or not checks[(m, k)]["stable"] for k in ("plan", "two-layer"))]
    if bad:
        print(f"gpu_bench: outside rel-L2 1e-4 or not bitwise stable: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
