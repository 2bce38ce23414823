"""Embedded against appliance against cloud, as a client sees a run: the
same model, inputs and single vEU run by `tessera run` in this process
alone (embedded), as an appliance tenant of a tesserad started here, and
as a cloud tenant of it, in interleaved rounds; medians of each run's wall
time (`runs[].wall_ms` of `tessera run --json`: the whole Session::run
call). Then throughput: two appliance tenants running ResNet-18 at once,
one core each, against one process running it alone on one core.
Targets: appliance <= embedded + 1 us; cloud <= embedded + 10 us on the
Add chain.

Usage: /usr/bin/python3 bench/daemon_bench.py [--build build] [--rounds 5] [--out FILE]"""
import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

WORKLOADS = [("add_chain", 2000), ("bert_tiny", 200), ("resnet18", 40)]
TOKENS = {"app": "bench-appliance", "cloud": "bench-cloud", "app2": "bench-appliance-2"}


def start_daemon(build, d):
    sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    with open(os.path.join(d, "t.toml"), "w") as f:
        f.write(textwrap.dedent(f"""\
            [daemon]
            socket = "{d}/d.sock"
            state_dir = "{d}/state"
            [[tenant]]
            name = "app"
            token_sha256 = "{sha(TOKENS['app'])}"
            [[tenant]]
            name = "app2"
            token_sha256 = "{sha(TOKENS['app2'])}"
            [[tenant]]
            name = "cloud"
            token_sha256 = "{sha(TOKENS['cloud'])}"
            mode = "cloud"
            """))
    every = os.sched_getaffinity(0)
    p = subprocess.Popen([os.path.join(build, "bin", "tesserad"), "--config", f"{d}/t.toml", "--quiet"],
                         preexec_fn=lambda: os.sched_setaffinity(0, every))
    while not os.path.exists(f"{d}/d.sock"):
        time.sleep(0.02)
    return p


def run(build, name, iters, env=None, warmup=20):
    zoo = os.path.join(build, "zoo")
    out = subprocess.run([os.path.join(build, "bin", "tessera"), "run", os.path.join(zoo, name + ".onnx"), "--input",
                          os.path.join(zoo, name + ".inputs.npz"), "--threads", "1", "--iters", str(iters), "--warmup",
                          str(warmup), "--json", "--quiet"],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{name}: {out.stderr.strip()}")
    return [1e3 * r["wall_ms"] for r in json.loads(out.stdout)["runs"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="tessera-daemon-bench-")
    daemon = start_daemon(a.build, d)
    uri = f"unix://{d}/d.sock"
    env = {mode: dict(os.environ, TESSERA_CONNECT=uri, TESSERA_TOKEN=TOKENS[mode]) for mode in ("app", "cloud")}
    lines = ["| workload | runs | embedded (us) | appliance (us) | cloud (us) | appliance - embedded | cloud - embedded |",
             "|---|---|---|---|---|---|---|"]
    try:
        for name, iters in WORKLOADS:
            walls = {"embedded": [], "app": [], "cloud": []}
            for r in range(a.rounds):
                walls["embedded"] += run(a.build, name, iters)
                walls["app"] += run(a.build, name, iters, env["app"])
                walls["cloud"] += run(a.build, name, iters, env["cloud"])
                print(f"{name}: round {r + 1}/{a.rounds}", file=sys.stderr)
            m = {k: statistics.median(v) for k, v in walls.items()}
            lines.append(f"| {name} | {len(walls['embedded'])} | {m['embedded']:.1f} | {m['app']:.1f} | {m['cloud']:.1f} "
                         f"| {m['app'] - m['embedded']:+.1f} | {m['cloud'] - m['embedded']:+.1f} |")
        # Throughput: two tenants at once, one core each, against one alone.
        iters = 150
        alone_t0 = time.monotonic()
        run(a.build, "resnet18", iters, warmup=5)
        alone = iters / (time.monotonic() - alone_t0)
        env2 = dict(os.environ, TESSERA_CONNECT=uri, TESSERA_TOKEN=TOKENS["app2"])
        t0 = time.monotonic()
        ps = [subprocess.Popen([os.path.join(a.build, "bin", "tessera"), "run", os.path.join(a.build, "zoo", "resnet18.onnx"),
                                "--threads", "1", "--iters", str(iters), "--warmup", "5", "--quiet"], env=e,
                               stdout=subprocess.DEVNULL) for e in (env["app"], env2)]
        for p in ps:
            p.wait()
        both = 2 * iters / (time.monotonic() - t0)
        lines += ["", "| ResNet-18 throughput | runs/s |", "|---|---|",
                  f"| one process alone, 1 vEU | {alone:.1f} |",
                  f"| two appliance tenants at once, 1 vEU each | {both:.1f} ({both / alone:.2f}x) |"]
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write("# tesserad: embedded, appliance, cloud\n\nClient-observed medians of a run's wall time; "
                    "1 vEU; the host as `tessera topo` describes it. Throughput runs include compiling.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
