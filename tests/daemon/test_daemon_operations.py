"""tesserad under load and as operators see it: every result back once to its
run, the CLI starting and stopping a daemon, metrics and top, ring
submissions checked, admission by latency objective. Each test starts its
own daemon on a socket in a temporary directory and stops it by its pid."""
from daemon_util import *  # noqa: F401,F403 (the shared daemon, config and raw clients)


# --------------------------------------------------------------------- load ---

def test_load_every_result_comes_back_once_to_its_run(daemon):
    """N clients x M runs (appliance and cloud at once), each run on its own
    input: every output is the one its input makes (nothing lost, swapped or
    repeated), and the clients' p99 latency is reported. TESSERA_SOAK=1 runs
    it a hundred times longer (make soak)."""
    runs = 100 * (100 if os.environ.get("TESSERA_SOAK") else 1)
    dm = daemon(lease_timeout=10)
    ref = tessera.connect().compile(zoo("mlp.onnx"), profile=False, measure=False).session(veus=1)
    shape = inputs_of("mlp")["input"].shape
    clients = {name: dm.connect(tok).compile(zoo("mlp.onnx")).session() for name, tok in (("alice", ALICE), ("carol", CAROL))}
    results, latency, errors = {}, {}, []

    import threading

    def client(name, s, seed):
        rng = np.random.default_rng(seed)
        got, lat = [], []
        try:
            for _ in range(runs):
                x = rng.standard_normal(shape).astype(np.float32)
                t0 = time.perf_counter()
                y = s.run({"input": x})["output"].copy()
                lat.append(time.perf_counter() - t0)
                got.append((x, y))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"{name}: {e}")
        results[name], latency[name] = got, lat

    ts = [threading.Thread(target=client, args=(n, s, i)) for i, (n, s) in enumerate(clients.items())]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for name, got in results.items():
        assert len(got) == runs, name
        for x, y in got:
            np.testing.assert_allclose(y, ref.run({"input": x})["output"], rtol=1e-5, atol=1e-6)
        lat = sorted(latency[name])
        print(f"\n{name}: {runs} runs, median {1e6 * lat[len(lat) // 2]:.0f} us, "
              f"p99 {1e6 * lat[int(len(lat) * 0.99) - 1]:.0f} us")


def test_cli_daemon_start_status_stop(tmp_path):
    cfg = tmp_path / "t.toml"
    cfg.write_text(config_text(str(tmp_path)))
    run = lambda *a: subprocess.run([TESSERA, "daemon", *a, "--config", str(cfg)], capture_output=True, text=True,  # noqa: E731
                                    timeout=60)
    assert run("status").returncode == 3
    started = run("start")
    assert started.returncode == 0 and "running, pid" in started.stdout, started.stderr
    pid = int(open(tmp_path / "state" / "tesserad.pid").read())
    try:
        assert run("status").returncode == 0
        assert tessera.connect(f"unix://{tmp_path}/d.sock", token=ROOT).status()["pid"] == pid
        again = run("start")  # a second one on the same socket is refused
        assert again.returncode != 0
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0 and f"stopped (pid {pid})" in stopped.stdout
    assert run("status").returncode == 3
    assert not os.path.exists(tmp_path / "d.sock") and not os.path.exists(tmp_path / "state" / "tesserad.pid")



# ------------------------------------------------------- metrics and top ---

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scrape(port):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series = {}
    for line in text.splitlines():
        if line.startswith("tessera_"):
            name, value = line.rsplit(" ", 1)
            series[name] = float(value)
    return series


def test_metrics_and_top_count_what_ran(daemon):
    port = free_port()
    dm = daemon(metrics=f"127.0.0.1:{port}")
    feeds = inputs_of("mlp")
    c = dm.connect(CAROL).compile(zoo("mlp.onnx")).session()
    a = dm.connect(ALICE).compile(zoo("mlp.onnx"), profile=False, measure=False).session()
    for _ in range(25):
        c.run(feeds)
    for _ in range(40):
        a.run(feeds)
    with pytest.raises(tessera.PermissionDenied):
        dm.connect("nope")
    # Appliance runs reach the daemon with the client's pings (every quarter
    # of the 1 s lease timeout), cloud runs through the rings with the
    # worker's answer to the daemon's question (once a second).
    keys = {'tessera_runs_total{mode="appliance",tenant="alice"}': 40, 'tessera_runs_total{mode="cloud",tenant="carol"}': 25}
    assert wait_until(lambda: all(scrape(port).get(k) == n for k, n in keys.items()), 4) is not None, scrape(port)
    m = scrape(port)
    assert m['tessera_runs_total{mode="cloud",tenant="carol"}'] == 25
    assert m['tessera_run_latency_seconds_count{tenant="carol"}'] == 25
    assert 0 < m['tessera_run_latency_seconds_sum{tenant="carol"}'] < 25
    assert m['tessera_faults_total{kind="auth_refused",tenant=""}'] == 1
    assert m['tessera_device_veus{device="cpu"}'] == len(os.sched_getaffinity(dm.proc.pid))
    assert m['tessera_device_veus_leased{device="cpu"}'] == 2
    assert m['tessera_sessions{mode="cloud",tenant="carol"}'] == 1
    assert m['tessera_memory_used_bytes{tenant="alice"}'] == os.path.getsize(zoo("mlp.onnx"))
    # Status carries the same counts; top shows them per vDevice.
    v = {x["tenant"]: x for x in dm.status()["devices"][0]["vdevices"]}
    assert v["carol"]["runs"] == 25 and v["alice"]["runs"] == 40 and v["carol"]["mode"] == "cloud"
    stop = []

    def keep_running():
        while not stop:
            c.run(feeds)

    import threading
    t = threading.Thread(target=keep_running)
    t.start()
    try:
        top = subprocess.run([TESSERA, "top", "--once", "--interval", "2.5", "--connect", dm.uri, "--token", ROOT],
                             capture_output=True, text=True, timeout=30)
    finally:
        stop.append(1)
        t.join()
    assert top.returncode == 0, top.stderr
    row = next(line for line in top.stdout.splitlines() if " carol " in line and "cloud" in line)
    runs_per_s = float(row.split()[4])
    assert runs_per_s > 0, top.stdout
    assert "TENANT" in top.stdout and "alice" in top.stdout


def test_cloud_model_with_dynamic_dimensions_bound_at_compile(daemon):
    dm = daemon()
    feeds = inputs_of("bert_tiny")
    shapes = {k: v.shape for k, v in feeds.items()}
    want = tessera.connect().compile(zoo("bert_tiny.onnx"), shapes=shapes, profile=False, measure=False).session(
        veus=1).run(feeds)
    m = dm.connect(CAROL).compile(zoo("bert_tiny.onnx"), shapes=shapes)
    s = m.session()
    assert [shape for _, _, shape in s.inputs] == [tuple(v.shape) for v in feeds.values()]
    got = s.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    with pytest.raises(tessera.InvalidArgument, match="dynamic dimension"):
        dm.connect(CAROL).compile(zoo("bert_tiny.onnx")).session()


# -------------------------------------------------------------------- rings ---

class RawRings:
    """A region laid out as src/daemon/ring.h says (docs/formats/protocol.md),
    driven by hand: submissions the library would never make."""
    DATA = 8192

    def __init__(self, raw_client, session, data_bytes):
        import mmap
        self.size = self.DATA + data_bytes
        self.fd = os.memfd_create("test-rings")
        os.ftruncate(self.fd, self.size)
        self.m = mmap.mmap(self.fd, self.size)
        struct.pack_into("<IIIIQQ", self.m, 0, 0x474E5254, 1, 8, 0, self.DATA, data_bytes)
        req = raw_client.pb.Request()
        req.ring.session = session
        raw_client.id += 1
        req.id = raw_client.id
        raw_client.s.sendmsg([frame(req)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", self.fd))])
        head = raw_client._exact(4)
        r = raw_client.pb.Reply()
        r.ParseFromString(raw_client._exact(struct.unpack("<I", head)[0]))
        self.setup = r

    def u32(self, off, value=None):
        if value is None:
            return struct.unpack_from("<I", self.m, off)[0]
        struct.pack_into("<I", self.m, off, value)

    def submit(self, ins, outs, n_in=None, n_out=None):
        tail = self.u32(64)
        e = 320 + (tail % 8) * 528
        struct.pack_into("<QII", self.m, e, tail, len(ins) if n_in is None else n_in, len(outs) if n_out is None else n_out)
        for i, (off, n) in enumerate(ins):
            struct.pack_into("<QQ", self.m, e + 16 + 16 * i, off, n)
        for i, (off, n) in enumerate(outs):
            struct.pack_into("<QQ", self.m, e + 16 + 256 + 16 * i, off, n)
        self.u32(64, tail + 1)
        return tail

    def complete(self, timeout=10):
        head = self.u32(256)
        deadline = time.monotonic() + timeout
        while self.u32(192) == head:
            assert time.monotonic() < deadline, "no completion"
            time.sleep(0.0005)
        c = 4544 + (head % 8) * 256
        user, code, ms = struct.unpack_from("<Qif", self.m, c)
        message = bytes(self.m[c + 16:c + 256]).split(b"\0")[0].decode()
        self.u32(256, head + 1)
        return user, code, message


def test_ring_submissions_are_checked_and_a_dead_worker_answers_through_the_daemon(daemon, tmp_path):
    pb = protocol_module(str(tmp_path))
    dm = daemon(fault_injection=True)
    feeds = inputs_of("mlp")
    x = feeds["input"]
    want = tessera.connect().compile(zoo("mlp.onnx"), profile=False, measure=False).session(veus=1).run(feeds)["output"]
    raw_client, session = open_raw_session(dm, pb, "mlp")
    out_off, out_n = 50176, want.nbytes  # after the input (16 x 784 floats)
    rings = RawRings(raw_client, session, 64 * 1024)
    assert rings.setup.code == 0, rings.setup.message
    data = lambda off, n: bytes(rings.m[RawRings.DATA + off:RawRings.DATA + off + n])  # noqa: E731
    rings.m[RawRings.DATA:RawRings.DATA + x.nbytes] = x.tobytes()
    good = ([(0, x.nbytes)], [(out_off, out_n)])
    tag = rings.submit(*good)
    assert rings.complete() == (tag, 0, "")
    np.testing.assert_allclose(np.frombuffer(data(out_off, out_n), np.float32).reshape(want.shape), want, rtol=1e-5,
                               atol=1e-6)
    # Spans outside the data area, of the wrong size, misaligned, overlapping,
    # and counts that are not the session's: each refused, named.
    for ins, outs, n_in, says in [
        ([(1 << 40, x.nbytes)], [(out_off, out_n)], None, "inside the"),
        ([(64 * 1024 - 8, x.nbytes)], [(out_off, out_n)], None, "inside the"),
        ([(0, x.nbytes - 4)], [(out_off, out_n)], None, "it needs"),
        ([(2, x.nbytes)], [(out_off, out_n)], None, "aligned to 4"),
        ([(0, x.nbytes)], [(64, out_n)], None, "overlaps an input"),
        ([(0, x.nbytes)], [(out_off, out_n)], 3, "takes 1 input"),
    ]:
        rings.submit(ins, outs, n_in=n_in)
        _, code, message = rings.complete()
        assert code != 0 and says in message, (ins, outs, message)
    # Counters a client forges: the worker takes at most what is there, one
    # by one, and answers each.
    tail = rings.u32(64)
    rings.u32(64, tail + 5)
    for _ in range(5):
        rings.complete()
    tag = rings.submit(*good)
    assert rings.complete() == (tag, 0, "")
    # The worker dies with a submission waiting: it is answered (by the
    # daemon, or by the worker started again), and runs work after.
    crash = pb.Request()
    crash.crash.session = session
    assert raw_client.call(crash).code == 0
    rings.submit(*good)
    rings.complete(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        tag = rings.submit(*good)
        user, code, message = rings.complete(timeout=30)
        if code == 0:
            break
        assert "worker" in message and time.monotonic() < deadline, message
    assert user == tag
    assert any(f["kind"] == "worker_crash" for f in dm.connect(ROOT).faults())


# ------------------------------------------------------- admission by schedule ---

def test_admission_by_latency_objective(daemon):
    dm = daemon()
    # What the Plan predicts on one vEU, from the session that ran it.
    probe = dm.connect(ALICE).compile(zoo("resnet18.onnx"), profile=False, measure=False)
    s = probe.session(latency_ms=1e6)
    predicted = next(v for v in dm.leases() if v["tenant"] == "alice")["predicted_ms"]
    assert predicted > 1
    assert next(v for v in dm.leases() if v["tenant"] == "alice")["objective_ms"] == 1e6
    del s
    assert wait_until(lambda: dm.leases() == [], 2) is not None
    # An objective below the prediction: refused with both figures, for an
    # appliance tenant (its client asks) and a cloud one (its worker checks);
    # nothing is left leased.
    with pytest.raises(tessera.ResourceExhausted, match=r"predicted to take .* ms; the objective is 0.5 ms"):
        probe.session(latency_ms=0.5)
    cloud = dm.connect(CAROL).compile(zoo("resnet18.onnx"))
    with pytest.raises(tessera.ResourceExhausted, match=r"predicted to take .* ms; the objective is 0.5 ms"):
        cloud.session(latency_ms=0.5)
    assert wait_until(lambda: dm.leases() == [], 2) is not None
    # Met: admitted, and status shows the prediction beside what runs measure.
    c = cloud.session(latency_ms=1e6)
    feeds = inputs_of("resnet18")
    for _ in range(3):
        c.run(feeds)
    v = next(v for v in dm.leases() if v["tenant"] == "carol")
    assert v["objective_ms"] == 1e6 and v["predicted_ms"] > 1
    assert wait_until(lambda: next(x for x in dm.leases() if x["tenant"] == "carol")["runs"] == 3, 3) is not None
    out = subprocess.run([TESSERA, "status", "--connect", dm.uri, "--token", ROOT], capture_output=True, text=True)
    assert "GOAL/PLAN/RUNS" in out.stdout and "1e+06/" in out.stdout, out.stdout
    # Local sessions take the objective too.
    local = tessera.connect().compile(zoo("mlp.onnx"), profile=False, measure=False)
    with pytest.raises(tessera.ResourceExhausted, match="the objective is 1e-06 ms"):
        local.session(latency_ms=1e-6)
    with pytest.raises(tessera.InvalidArgument, match="needs the plan executor"):
        local.session(latency_ms=5, executor="sequential")
