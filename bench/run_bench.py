#!/usr/bin/python3
"""Tessera's benchmark: every workload on every system, interleaved, on
identical inputs, in one run.

Systems: Tessera's Plan executor with every vEU it is given (policy auto:
it may keep a Plan on fewer when that ran faster), Tessera's 1-vEU Plan,
Tessera's two-layer executor, ONNX Runtime 1.20 (npm onnxruntime-node, 2
intra-op threads, all graph optimizations) and PyTorch (Debian, 2
threads). Each system is a process kept alive for the whole workload
(Tessera through its Python module, bench/tessera_server.py; ONNX Runtime
in node, bench/models/ort_run.js; PyTorch in this process); the Plan, the
1-vEU Plan and ONNX Runtime run in --processes processes each (default 2)
that take the system's batches in turn, so that no one process's memory
layout decides its figures. Each round
runs every system, in an order that rotates from round to round, for a
batch of about --batch-ms after a warm-up, with a pause after each batch
for spinning threads to park. The host moves between states that last
seconds; batches a fraction of a second long, alternating, put every
system in the same states, so medians and 90th percentiles are taken over
all timed runs pooled, and a system's tail is its pooled p90/median.
Prints a table of medians, p90s and ratios (to ONNX Runtime, to the 1-vEU
Plan, predicted to measured: the Plan's predicted makespan over the median
of its runs on its vEUs, as placed or exchanged, which leaves out the runs
its session moved to one thread while the host held the vEUs back; for a
Plan chosen to start alone whose runs mostly stayed alone, its prediction
of a run alone over those runs'). Under the table, each workload that
misses its target against ONNX Runtime gets the Plan's work (its rTasks'
costs as the Plan charged them, summed and spread evenly over its vEUs:
at those costs, no schedule of them does better) as a ratio to ONNX
Runtime's median, and the notes that work out its floors. It writes the
section of bench/RESULTS.md for this host's shape (the host map's
digest), keeping the sections of other host shapes.

Every timed run is also written, batch by batch, to --runs (JSON: per
workload, the systems' order in each round and, per system, one list of
run times in ms per round, and for Tessera's Plans how each run went: P
as placed, A alone, X exchanged), for looking at tails round by round.

Usage: /usr/bin/python3 bench/run_bench.py [--rounds N] [--batch-ms MS]
           [--processes N] [--only W,...] [--unseen] [--quick] [--out bench/RESULTS.md]
           [--runs build/bench/runs.json]
"""
import argparse
import atexit
import datetime
import json
import math
import os
import platform
import shutil
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
# The Plan with every vEU against the 1-vEU Plan, and predicted against
# measured (zoo models), and Tessera's p90/median against ONNX Runtime's.
MAX_PLAN_OVER_ONE_VEU = 1.02
MAX_PREDICTION_ERROR = 0.20
# Every batch has at least MIN_ITERS timed runs and at most MAX_ITERS
# (about --batch-ms of them in between), after a quarter as many untimed
# (at least 2: the other systems ran in between).
MIN_ITERS = 3
MAX_ITERS = 5000
# After each batch: ONNX Runtime's pool spun on for about 10 ms after its
# last run, and PyTorch's OpenMP threads and Tessera's vEUs spin too
# before they park; a batch that began sooner shared its cores with them.
GAP_S = 0.05
TARGETS = {  # the targeted median time as a ratio to ONNX Runtime
    "add_chain": 0.15, "add_chains8": 0.15, "bert_tiny": 0.5, "lstm_tc": 0.8, "nasnet_like": 0.7,
    "resnet18": 1.0, "mobilenet_v2": 1.0,
}
# Where a workload's floors (FLOPs over peak, bytes over bandwidth) are
# worked out, cited under the table when its target is missed.
AVX2_FLOORS = "docs/notes/2026-11-27-an-avx2-host.md, section \"Floors on this host\" (AVX2 kernels)"
FLOORS = {
    "lstm_tc": "docs/notes/2026-11-24-kernels-fusion-plans.md, section \"Lowering recurrent layers\", "
               "docs/notes/2026-11-25-changing-hosts.md, section \"Floors on this host\", " + AVX2_FLOORS + ", "
               "docs/notes/2026-11-29-lstm-gates-and-turns.md, section \"Where a layer of LSTM-TC goes\", "
               "docs/notes/2026-11-29-choices-that-outlive-their-moment.md, section \"LSTM-TC's carrying steps: "
               "the floor\", and docs/notes/2026-11-29-lstm-layer-boundaries.md, section \"Where a layer's "
               "boundary goes\" (AVX-512, Zen 4)",
    "nasnet_like": "docs/notes/2026-11-25-changing-hosts.md, section \"Floors on this host\" (AMD EPYC), "
                   "docs/notes/2026-11-26-an-intel-host.md, \"NASNet-like on this host\" (Intel Xeon), "
                   "docs/notes/2026-11-28-packed-weights-and-slow-states.md, section \"Bench runs 23 and 24\" (AVX2), "
                   "docs/notes/2026-11-30-depthwise-strips-on-zen-3.md, section \"NASNet-like's work on this "
                   "host\" (AVX2, Zen 3), docs/notes/2026-11-30-epilogues-and-slow-states.md, section "
                   "\"Bench runs 70 and 71\" (what the target asks of the Plan there), "
                   "docs/notes/2026-11-30-tests-on-a-busy-host-and-5x5-columns.md, section \"NASNet-like's "
                   "rTasks in a run and alone\" (rTasks in a run against the profile), "
                   "docs/notes/2026-11-30-prefetching-b-and-nasnet-kernels.md, section \"Where NASNet-like's "
                   "time is now\" (each kernel's share of peak), "
                   "docs/notes/2026-11-30-what-bounds-nasnet-kernels.md (the 2-vEU Plan's work against the "
                   "1-vEU Plan's, and what holds each kernel back), "
                   "docs/notes/2026-11-30-depthwise-columns-and-residual-prefetch.md (the depthwise tiles' "
                   "chains, and rTasks in a run against alone), and "
                   "docs/notes/2026-11-30-pool-edges-and-the-cost-of-a-relu.md (what the Relu between cells "
                   "costs, and the bench's Python harness against `tessera run`)",
    "bert_tiny": "docs/notes/2026-11-25-changing-hosts.md, section \"Floors on this host\", " + AVX2_FLOORS + ", "
                 "docs/notes/2026-11-28-packed-weights-and-slow-states.md, sections \"gemm_rows' narrow column "
                 "blocks, and the K^T copy\" and \"Bench run 26\", docs/notes/2026-11-29-output-planes.md, "
                 "section \"Tiny BERT's floor on this host\" (AVX-512, Zen 4), "
                 "docs/notes/2026-11-30-where-the-last-targets-stand.md, section \"Tiny BERT, rTask by rTask\", "
                 "docs/notes/2026-12-01-tiny-berts-work-on-zen-3.md (the model's rTask work, timed alone, "
                 "against the target; AVX2, Zen 3), and docs/notes/2026-12-01-a-zen-5-host.md, section \"Tiny "
                 "BERT on this host\" (AVX-512, Zen 5)",
    "resnet18": "docs/notes/2026-11-26-an-intel-host.md, section \"ResNet-18 on this host\", " + AVX2_FLOORS + ", and "
                "docs/notes/2026-11-28-weights-from-memory.md, section \"ResNet-18's last stage\"",
    "mobilenet_v2": AVX2_FLOORS + ", docs/notes/2026-11-28-packed-weights-and-slow-states.md, section "
                    "\"Bench runs 23 and 24\", and docs/notes/2026-11-30-depthwise-strips-on-zen-3.md, section "
                    "\"MobileNetV2: three levels\" (AVX2, Zen 3)",
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


def tessera_run(tessera, model, inputs_npz, iters, warmup, executor, threads, extra=()):
    """One `tessera run`: its per-run compute times (ms) and its --json object."""
    out = subprocess.run([tessera, "run", model, "--input", inputs_npz, "--iters", str(iters), "--warmup",
                          str(warmup), "--threads", str(threads), "--executor", executor, "--json", "--quiet",
                          *extra],
                         check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    return [r["compute_ms"] for r in j["runs"]], j


def tessera_times(tessera, model, inputs_npz, iters, warmup, executor, threads, extra=()):
    return tessera_run(tessera, model, inputs_npz, iters, warmup, executor, threads, extra)[0]


def host_map(tessera):
    """This host's map (`tessera topo --json`), measured or from the cache."""
    out = subprocess.run([tessera, "topo", "--json", "--quiet"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


def wait_quiet(tessera, limit_s=60):
    """Polls `tessera topo --gauge` until the host is as its map describes
    (every PU at full speed at once, hand-offs as mapped); returns the
    seconds waited, or None when it was not for limit_s."""
    t0 = time.monotonic()
    while True:
        if subprocess.run([tessera, "topo", "--gauge", "--quiet"], capture_output=True).returncode == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit_s:
            return None
        time.sleep(1)


def p90(v):
    return float(np.percentile(v, 90))


class Server:
    """A system kept alive for a workload, in a process of its own: one
    batch per request ("WARMUP ITERS" on its stdin, {"ms": [...]} back)."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                  env=env)
        self.hello = self._reply()

    def _reply(self):
        line = self.p.stdout.readline()
        if not line:
            self.p.wait()
            self.err.seek(0)
            raise RuntimeError(f"{self.name} stopped (exit status {self.p.returncode}): "
                               f"{self.err.read().strip()[-2000:]}")
        return json.loads(line)

    def times(self, warmup, iters):
        self.p.stdin.write(f"{warmup} {iters}\n")
        self.p.stdin.flush()
        reply = self._reply()
        self.ways = reply.get("ways")  # Tessera's: how each run went (P, A, X)
        return reply["ms"]

    def kill(self):
        """Ends the process (by its pid): stdin closed, then a kill if it lingers."""
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        self.err.close()


class Processes:
    """One system in several processes, each running a share of every
    batch in turn (a pause between them, as between batches). A process's
    memory layout (where its heap, stack and the kernels' packed weights
    lie, modulo a page) makes its small ops a few percent faster or slower
    for its whole life, so a system measured in one process carries that
    process's luck; its runs pooled over several carry less of it.
    `rounds` holds, per batch, each process's median: met in the same host
    state, their ratio is the process's luck."""

    def __init__(self, make, n):
        self.servers = []
        try:
            for _ in range(n):
                self.servers.append(make())
        except BaseException:
            self.kill()
            raise
        self.hello = self.servers[0].hello
        self.rounds = []

    def times(self, warmup, iters):
        ms, ways, medians = [], "", []
        share = max(1, math.ceil(iters / len(self.servers)))
        for i, s in enumerate(self.servers):
            if i > 0:
                time.sleep(GAP_S)
            got = s.times(max(2, warmup // len(self.servers)), share)
            ms.extend(got)
            ways += getattr(s, "ways", None) or ""
            medians.append(statistics.median(got))
        self.ways = ways or None
        self.rounds.append(medians)
        return ms

    def luck(self):
        """The median over batches of the slowest process's median over the
        fastest's (1: no difference), or None with one process."""
        spans = [max(m) / min(m) for m in self.rounds if len(m) > 1 and min(m) > 0]
        return statistics.median(spans) if spans else None

    def kill(self):
        for s in self.servers:
            s.kill()


def tessera_server(build, model, npz, veus, executor="plan", fuse=True):
    return Server(f"tessera ({executor}, {veus} vEUs{'' if fuse else ', unfused'})",
                  [sys.executable, os.path.join(HERE, "tessera_server.py"), "--build", build, model, npz,
                   "--veus", str(veus), "--executor", executor] + ([] if fuse else ["--no-fuse"]))


def ort_server(node_dir, model, input_dir, threads):
    env = dict(os.environ, NODE_PATH=os.path.join(node_dir, "node_modules"))
    return Server("ONNX Runtime", ["node", os.path.join(HERE, "models", "ort_run.js"), model, input_dir,
                                   str(threads)], env)


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

    def bind(self, inputs):
        self.args = tuple(self.torch.from_numpy(v) for v in inputs)
        return self

    def times(self, warmup, iters):
        args = self.args
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


def measure(w, systems, a, quiet):
    """Rounds of one batch per system, in an order that rotates: each
    system's timed runs per batch, and its batches."""
    # Each system's batch lasts about --batch-ms, by its own probe.
    iters = {}
    for name, sys_ in systems.items():
        t = statistics.median(sys_.times(2, MIN_ITERS))
        iters[name] = min(max(MIN_ITERS, math.ceil(a.batch_ms / max(t, 1e-3))), MAX_ITERS)
        time.sleep(GAP_S)
    batches = {name: [] for name in systems}
    ways = {name: [] for name in systems}
    order = list(systems)
    orders = []
    for r in range(a.rounds):
        print(f"bench: {w} round {r + 1}/{a.rounds}", file=sys.stderr)
        quiet(f"{w} round {r + 1}")
        orders.append(order[r % len(order):] + order[:r % len(order)])
        for name in orders[-1]:
            n = iters[name]
            batches[name].append(systems[name].times(max(2, n // 4), n))
            if getattr(systems[name], "ways", None) is not None:
                ways[name].append(systems[name].ways)
            time.sleep(GAP_S)
    return batches, iters, orders, {k: v for k, v in ways.items() if v}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--node-dir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--batch-ms", type=float, default=100, help="timed length of each system's batch in a round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--processes", type=int, default=2,
                    help="processes each for Tessera's Plan, its 1-vEU Plan and ONNX Runtime, each running a share of every batch")
    ap.add_argument("--only", default="")
    ap.add_argument("--unseen", action="store_true", help="also the unseen-kind models (geometric mean)")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 20 ms batches: a smoke test, not a measurement")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--runs", default=os.path.join(ROOT, "build", "bench", "runs.json"),
                    help="where every timed run goes, per workload, system and round (JSON)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.batch_ms, a.processes = 2, 20, 1
    if a.processes < 1:
        print("bench: --processes must be 1 or more", file=sys.stderr)
        return 2
    tessera = os.path.join(a.build, "bin", "tessera")
    if not os.path.isdir(os.path.join(a.node_dir, "node_modules", "onnxruntime-node")):
        print(f"bench: onnxruntime-node is not installed under {a.node_dir}: run `make bench-deps` "
              "(or `make bench`, which installs it)", file=sys.stderr)
        return 2
    if not os.path.exists(tessera):
        print(f"bench: {tessera} is missing: run `make build`", file=sys.stderr)
        return 2
    if not os.path.isdir(os.path.join(a.build, "python", "tessera")):
        print(f"bench: Tessera's Python module is missing under {a.build}/python: run `make build`", file=sys.stderr)
        return 2
    names = [w for w in a.only.split(",") if w] or WORKLOADS + (UNSEEN if a.unseen else [])
    unknown = [w for w in names if w not in make_zoo.MODELS and w not in make_zoo.EXTRA]
    if unknown:
        print(f"bench: no workload named {', '.join(unknown)} (workloads: {', '.join(WORKLOADS + UNSEEN)})",
              file=sys.stderr)
        return 2
    maps = [host_map(tessera)]
    results, spread, plans = {}, {}, {}
    alone_share = {}  # per workload: the share of the Plan's timed runs that went alone
    waits, busy_rounds = [], []
    batch_iters = {}
    unfused = {}
    raw = {}
    luck = {}  # per workload and system: Processes.luck
    tmp = tempfile.mkdtemp(prefix="tessera-bench-")
    atexit.register(shutil.rmtree, tmp, True)

    def quiet(what):
        # Every round starts on a quiet host: a neighbour or hypervisor that
        # takes a share of our PUs skews whoever runs then.
        waited = wait_quiet(tessera)
        if waited is None:
            busy_rounds.append(what)
        elif waited > 0.5:
            waits.append(waited)

    for w in names:
        zoo = os.path.join(a.build, "zoo" if w in make_zoo.MODELS else "zoo-extra")
        model, npz = os.path.join(zoo, w + ".onnx"), os.path.join(zoo, w + ".inputs.npz")
        if not os.path.exists(model):
            print(f"bench: {model} is missing: run `make zoo`", file=sys.stderr)
            return 2
        in_dir = os.path.join(tmp, w)
        os.makedirs(in_dir)
        arrays = write_inputs(npz, input_names(model), in_dir)
        print(f"bench: {w}: starting the systems", file=sys.stderr)
        systems = {}
        try:
            # One at a time: the Plan's session times its candidates when it
            # opens (policy auto), and must not share the cores while it does.
            # The three systems whose ratios have targets, each in
            # --processes processes.
            systems["tessera-plan"] = Processes(lambda: tessera_server(a.build, model, npz, a.threads), a.processes)
            systems["onnxruntime"] = Processes(lambda: ort_server(a.node_dir, model, in_dir, a.threads), a.processes)
            systems["tessera-1veu"] = Processes(lambda: tessera_server(a.build, model, npz, 1), a.processes)
            systems["tessera-two-layer"] = tessera_server(a.build, model, npz, a.threads, "two-layer")
            systems["pytorch"] = Torch(w, a.threads).bind(arrays)
            if w in SCHEDULING:  # the same chains with fusion off: scheduling alone
                systems["unfused"] = tessera_server(a.build, model, npz, a.threads, fuse=False)
            batches, iters, orders, ways = measure(w, systems, a, quiet)
            raw[w] = {"order": orders, "ms": dict(batches), "ways": ways}
        except RuntimeError as e:
            print(f"bench: {w}: {e}", file=sys.stderr)
            return 1
        finally:
            for sys_ in systems.values():
                if isinstance(sys_, (Server, Processes)):
                    sys_.kill()
        plans[w] = systems["tessera-plan"].hello["plan"]
        # Each process compiled and chose its own Plan.
        plans[w]["veus_per_process"] = [s.hello["plan"]["veus"] for s in systems["tessera-plan"].servers]
        luck[w] = {name: systems[name].luck() for name in systems if isinstance(systems[name], Processes)}
        raw[w]["process_medians"] = {name: systems[name].rounds for name in systems
                                     if isinstance(systems[name], Processes)}
        batch_iters[w] = iters
        if "unfused" in batches:
            unfused[w] = [x for b in batches.pop("unfused") for x in b]
        times = {name: [x for b in v for x in b] for name, v in batches.items()}
        results[w] = {name: statistics.median(v) for name, v in times.items()}
        # The prediction against the runs that went the way it predicts:
        # the Plan's makespan against its runs on its vEUs (as placed or
        # exchanged), a run alone (alone_first) against the runs alone
        # where those are most of a Plan's that starts alone.
        ran = list(zip([x for b in batches["tessera-plan"] for x in b], "".join(ways.get("tessera-plan", []))))
        placed = [x for x, way in ran if way != "A"]
        alone = [x for x, way in ran if way == "A"]
        alone_share[w] = len(alone) / len(ran) if ran else 0
        if plans[w].get("alone_first") and len(alone) > len(placed):
            results[w]["predicted"], versus = plans[w]["alone_predicted_ms"], alone
        else:
            results[w]["predicted"], versus = plans[w]["predicted_ms"], placed or [x for x, _ in ran]
        results[w]["predicted_vs"] = statistics.median(versus)
        spread[w] = {name: p90(v) / statistics.median(v) for name, v in times.items()}
    maps.append(host_map(tessera))
    table, summary = report(results, spread, plans, unfused, overhead(tessera, tmp, a.threads, 5, 20), luck)
    went_alone = {w: s for w, s in alone_share.items() if s >= 0.05}
    if went_alone:
        summary += ("\nThe Plan's timed runs that its session ran on one thread (the host held the vEUs back, or a "
                    "Plan chosen to start alone): " + ", ".join(f"{w} {s:.0%}" for w, s in went_alone.items()) + ".\n")
    summary += ("\nTimed runs per batch (plan, ONNX Runtime): " +
                ", ".join(f"{w} {n['tessera-plan']}, {n['onnxruntime']}" for w, n in batch_iters.items()) + ".\n")
    summary += (f"\nBefore each round the host had to let every PU run at full speed at once (`tessera "
                f"topo --gauge`): {len(waits)} rounds waited for it ({sum(waits):.0f} s in all); "
                f"{len(busy_rounds)} ran on a busy host after 60 s" +
                (f" ({', '.join(busy_rounds)})" if busy_rounds else "") + ".\n")
    print(table + summary)
    write_results(a, tessera, maps, table, summary)
    os.makedirs(os.path.dirname(os.path.abspath(a.runs)), exist_ok=True)
    with open(a.runs, "w") as f:
        json.dump({"rounds": a.rounds, "batch_ms": a.batch_ms, "workloads": raw}, f)
    print(f"bench: every timed run in {a.runs}", file=sys.stderr)
    return 0


def verdicts(w, r, sp):
    """The targets this workload misses, as short phrases."""
    missed = []
    ratio = r["tessera-plan"] / r["onnxruntime"]
    if w in TARGETS and ratio > TARGETS[w]:
        missed.append(f"plan/ORT {ratio:.3f} > {TARGETS[w]}")
    if r["tessera-plan"] > MAX_PLAN_OVER_ONE_VEU * r["tessera-1veu"]:
        missed.append(f"plan/1-vEU {r['tessera-plan'] / r['tessera-1veu']:.3f} > {MAX_PLAN_OVER_ONE_VEU}")
    err = r["predicted"] / r["predicted_vs"] - 1
    if w in WORKLOADS and abs(err) > MAX_PREDICTION_ERROR:
        missed.append(f"predicted {err:+.0%}")
    if sp["tessera-plan"] > sp["onnxruntime"]:
        missed.append(f"p90/median {sp['tessera-plan']:.2f} > ORT's {sp['onnxruntime']:.2f}")
    return missed


def work_text(plan, ort, target):
    """What the Plan's own rTasks allow against ONNX Runtime: their costs as
    the Plan charged them (profiled, plus the data they fetch from other
    vEUs), summed over its vEUs and spread evenly with no wait. Above the
    target, no schedule of these rTasks meets it on this host."""
    busy = [v.get("predicted_busy_ms") for v in plan.get("per_veu", [])]
    if not busy or None in busy:
        return ""
    work = sum(busy)
    even = work / len(busy)
    return (f"the Plan's rTasks, as it costs them, are {work:.3f} ms of work a run: {even:.3f} ms on each of its "
            f"{len(busy)} vEU{'s' if len(busy) > 1 else ''} spread evenly with no wait, {even / ort:.3f} of ONNX "
            f"Runtime's median (target ≤ {target}); ")


def report(results, spread, plans, unfused, ov, luck):
    cols = ["plan ms (p90)", "vEUs", "1-vEU ms", "two-layer ms", "ORT ms (p90)", "PyTorch ms", "plan / ORT",
            "plan / 1-vEU", "predicted / measured", "p90/med plan", "p90/med ORT", "target"]
    lines = ["| workload | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    geo, missed_by = [], {}
    for w, r in results.items():
        sp, ort = spread[w], r["onnxruntime"]
        ratio = r["tessera-plan"] / ort
        if w in UNSEEN:
            geo.append(ratio)
        missed_by[w] = verdicts(w, r, sp)
        target = f"≤ {TARGETS[w]}" if w in TARGETS else ""
        verdict = (target + " " if target else "") + ("MISSED: " + "; ".join(missed_by[w]) if missed_by[w] else "met")
        plan = plans[w]
        each = plan.get("veus_per_process", [plan["veus"]])
        veus = (f"{plan['veus']} of {plan['requested_veus']}" if len(set(each)) == 1 else
                f"{' / '.join(str(v) for v in each)} of {plan['requested_veus']} (by process)")
        veus += ", alone first" if plan.get("alone_first") else ""
        lines.append(
            f"| {w} | {r['tessera-plan']:.3f} ({r['tessera-plan'] * sp['tessera-plan']:.3f}) | {veus} | "
            f"{r['tessera-1veu']:.3f} | {r['tessera-two-layer']:.3f} | "
            f"{ort:.3f} ({ort * sp['onnxruntime']:.3f}) | "
            f"{r['pytorch']:.3f} | {ratio:.3f} | {r['tessera-plan'] / r['tessera-1veu']:.3f} | "
            f"{r['predicted'] / r['predicted_vs']:.2f} | "
            f"{sp['tessera-plan']:.2f} | {sp['onnxruntime']:.2f} | {verdict} |")
    summary = ""
    for w, m in missed_by.items():
        if m and (w in TARGETS and results[w]["tessera-plan"] / results[w]["onnxruntime"] > TARGETS[w]):
            summary += (f"\nMissed: {w}; {work_text(plans[w], results[w]['onnxruntime'], TARGETS[w])}"
                        f"its floors and where its time goes: {FLOORS.get(w, 'none written down')}.\n")
    p90_missed = [w for w, m in missed_by.items() if any(x.startswith("p90") for x in m)]
    if p90_missed:
        summary += (f"\np90/median above ONNX Runtime's: {', '.join(p90_missed)}; why a static Plan's tail is longer "
                    "on a host that stops vCPUs or slows one: docs/notes/2026-11-25-changing-hosts.md, \"Why 2-vEU "
                    "Plans lose\", item 4, docs/notes/2026-11-26-stalled-moments-and-tails.md, "
                    "docs/notes/2026-11-29-depthwise-edges-and-held-back-choices.md, \"One Plan per host state\", "
                    "docs/notes/2026-11-29-one-thread-kernels-and-silu.md, \"Both systems fall to one thread in "
                    "the slow state\", docs/notes/2026-11-29-process-layout-and-moments.md, \"Bench runs "
                    "61–64\" (a session that goes alone at a batch's start), and "
                    "docs/notes/2026-11-30-coming-back-from-moments.md, \"Bench run 65\" (rounds in which the "
                    "host was slow for one system's batch), docs/notes/2026-11-30-where-the-last-targets-stand.md, "
                    "\"Slow batches, system by system\" (the host's slow state: rewrites of bytes the other core "
                    "held), docs/notes/2026-12-01-moments-in-traces-and-batches.md, \"Whose batches the "
                    "moments hit\" and \"One PU slow for a whole batch\", "
                    "docs/notes/2026-12-01-small-crossings-and-slow-states.md, \"Plans built for the slow "
                    "state\" and \"Runs alone in the bench's batches\", and "
                    "docs/notes/2026-12-01-a-zen-5-host.md, \"Tails\" (whole batches at the host's levels).\n")
    if geo:
        gm = float(np.exp(np.mean(np.log(geo))))
        summary += (f"\nUnseen models: geometric mean of plan/ORT {gm:.3f} (target ≤ 0.8), worst {max(geo):.3f} "
                    f"(target ≤ 1.25).\n")
    if unfused:
        summary += ("\nThe Add chains fuse into chains of TesseraFusedElementwise (up to 7 Adds each); with fusion "
                    "off (`--no-fuse`), scheduling every Add as its own op: " +
                    ", ".join(f"{w} {statistics.median(v):.3f} ms, plan/ORT "
                              f"{statistics.median(v) / results[w]['onnxruntime']:.3f}" for w, v in unfused.items()) +
                    ".\n")
    worst = {}  # per system: the workload whose processes differed most, and by how much
    for w, per in luck.items():
        for name, x in per.items():
            if x is not None and x - 1 >= worst.get(name, ("", 0))[1]:
                worst[name] = (w, x - 1)
    if worst:
        summary += ("\nEach of " + ", ".join(worst) + " ran in several processes, each running a share of every "
                    "batch (the medians above pool them); within a batch, the slowest process's median over the "
                    "fastest's was, as a median over batches, at most " +
                    ", ".join(f"{d:.1%} ({name}, {w})" for name, (w, d) in worst.items()) + ".\n")
    summary += (f"\nPer-rTask overhead on a chain of 10 000 trivial rTasks (one Add of one float each): "
                f"plan executor {ov['plan']:.1f} ns, two-layer {ov['two-layer']:.1f} ns (target ≤ 50 ns).\n")
    return "\n".join(lines), summary


def host_text(m):
    """The host map in a few lines: PUs, costs between them, conclusions."""
    if m is None:
        return "host map: unavailable (`tessera topo` failed)"
    n = len(m["pus"])
    pus = ", ".join(f"PU {p['os_index']} (core {p['core']}, L3 {p['l3']}, {p['fma_gflops']:.0f} GFLOP/s, "
                    f"{p['mem_gbps']:.0f} GB/s)" for p in m["pus"])
    rc = "; ".join(" ".join(f"{x:.1f}" for x in row) for row in m["read_cost"])
    hand = "; ".join(" ".join(f"{x:.0f}" for x in row) for row in m["handoff_ns"])
    sharing = ", ".join(f"{a}-{b} {m['sharing'][a][b]}" for a in range(n) for b in range(a + 1, n))
    text = (f"- PUs: {pus}; sharing: {sharing or 'one PU'} (from {m['groups_from']})\n"
            f"- read cost of 128 KB just written, ns per KB (rows read, columns wrote): {rc}\n"
            f"- hand-off, ns: {hand}\n")
    for c in m["conclusions"]:
        text += f"- {c}\n"
    return text


def write_results(a, tessera, maps, table, summary):
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
    first, last = maps[0], maps[-1]
    shape = f"{first['key']}, digest {first.get('digest', '?')}" if first else "unknown"
    moved = ""
    if first and last and first.get("digest") != last.get("digest"):
        moved = ("\nThe host changed during the run (its map was measured again, with another digest); at the "
                 "end:\n\n" + host_text(last))
    section = (f"## Host {shape}\n\nMeasured {datetime.date.today().isoformat()} on {cpu}, {os.cpu_count()} vCPUs, "
               f"{platform.platform()}; {a.threads} threads for every system (Tessera's 1-vEU Plan: 1); {a.rounds} "
               f"rounds; in each, every system, a process kept alive for the workload, runs a batch of about "
               f"{a.batch_ms:.0f} ms (at least {MIN_ITERS} timed runs, after a quarter as many untimed), in an order "
               f"that rotates from round to round; medians and p90s of compute time over all timed runs (inputs "
               f"already bound), and a system's tail as p90/median of them all: alternating batches a fraction of a "
               f"second long, every system met the host's states alike. Host map at the start (`tessera "
               f"topo`):\n\n{host_text(first)}{moved}\n"
               f"{table}\n{summary}")
    write_section(a.out, shape, section)


def write_section(path, shape, section):
    """Replaces this host shape's section of RESULTS.md, keeping the others."""
    header = ("# Benchmark results\n\nOne section per host shape (`tessera topo`: the CPU, its PUs and what "
              "crossing between them costs), each regenerated by `make bench` on such a host. Targets: "
              "docs/architecture.md, \"Performance\".\n")
    sections = {}
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        for part in text.split("\n## Host ")[1:]:
            sections[part.split("\n", 1)[0]] = "## Host " + part.rstrip() + "\n"
    sections[shape] = section.rstrip() + "\n"
    with open(path, "w") as f:
        f.write(header + "".join("\n" + s for s in sections.values()))


if __name__ == "__main__":
    sys.exit(main())
