"""tesserad from its clients' side: config errors, authentication, appliance
leases and quotas, reclaim of a client killed or gone silent, hostile and
forged requests, faults that survive a restart. Each test starts its own
daemon on a socket in a temporary directory and stops it by its pid."""
from daemon_util import *  # noqa: F401,F403 (the shared daemon, config and raw clients)


# ------------------------------------------------------------------ config ---

@pytest.mark.parametrize("bad, says", [
    ('[[tenant]]\nname = "a"\n', "'token_sha256' is required"),
    (f'[[tenant]]\nname = "a"\ntoken_sha256 = "{sha("x")}"\nmode = "fast"\n', "must be \"appliance\" or \"cloud\""),
    (f'[[tenant]]\nname = "a"\ntoken_sha256 = "{sha("x")}"\nmax_vues = 2\n', "'max_vues' is not a key of"),
    (f'[[tenant]]\nname = "a"\ntoken_sha256 = "{sha("x")}"\n[[tenant]]\nname = "a"\ntoken_sha256 = "{sha("y")}"\n',
     "listed twice"),
    (f'[[tenant]]\nname = "a"\ntoken_sha256 = "{sha("x")}"\nmax_memory = "lots"\n', "is not a size"),
    ('[daemon]\nsocket = 3\n', "'socket' must be a string"),
    ('[daemon\n', "t.toml:1"),
])
def test_bad_config_is_refused_naming_file_line_and_key(tmp_path, bad, says):
    path = tmp_path / "t.toml"
    path.write_text(bad)
    r = subprocess.run([TESSERAD, "--config", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert str(path) in r.stderr and says in r.stderr, r.stderr


def test_example_config_checks_and_its_example_token_is_its_hash():
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tesserad.toml")
    r = subprocess.run([TESSERAD, "--config", example, "--check"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "alice" in r.stdout and "ops" in r.stdout and "admin" in r.stdout
    assert sha("alice-example-token") in open(example).read()


def test_token_hash_is_sha256():
    assert tessera.token_hash("s3cret") == hashlib.sha256(b"s3cret").hexdigest()
    out = subprocess.run([TESSERA, "token", "hash"], input="s3cret\n", capture_output=True, text=True, check=True)
    assert out.stdout.strip() == hashlib.sha256(b"s3cret").hexdigest()
    new = subprocess.run([TESSERA, "token", "new"], capture_output=True, text=True, check=True).stdout.split()
    assert new[0] == "token" and new[2] == "token_sha256" and new[3] == hashlib.sha256(new[1].encode()).hexdigest()


# -------------------------------------------------------------------- auth ---

def test_wrong_token_and_wrong_uid_are_refused(daemon):
    dm = daemon(alice_extra=f"uids = [{os.getuid() + 1}]")
    with pytest.raises(tessera.PermissionDenied, match="no tenant has this token"):
        dm.connect("nope")
    with pytest.raises(tessera.PermissionDenied, match=f"uid {os.getuid()} may not act as tenant 'alice'"):
        dm.connect(ALICE)
    kinds = [f["kind"] for f in dm.connect(ROOT).faults()]
    assert kinds.count("auth_refused") == 2
    # A tenant sees its own faults only.
    assert dm.connect(BOB).faults() == []


# --------------------------------------------------------------- appliance ---

def test_appliance_runs_match_embedded_on_disjoint_leased_cores(daemon):
    dm = daemon()
    with np.load(zoo("resnet18.inputs.npz")) as z:
        feeds = {k: z[k] for k in z.files}
    want = tessera.connect().compile(zoo("resnet18.onnx"), profile=False, measure=False).session(veus=1).run(feeds)
    a = dm.connect(ALICE).compile(zoo("resnet18.onnx"), profile=False, measure=False).session()
    b = dm.connect(BOB).compile(zoo("mlp.onnx"), profile=False, measure=False).session()
    leases = dm.leases()
    assert sorted(v["tenant"] for v in leases) == ["alice", "bob"]
    cores = [set(v["cores"]) for v in leases]
    assert cores[0].isdisjoint(cores[1]) and all(len(c) == 1 for c in cores)
    assert set(a.cores) == next(set(v["cores"]) for v in leases if v["tenant"] == "alice")
    got = a.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    with np.load(zoo("mlp.inputs.npz")) as z:
        b.run({k: z[k] for k in z.files})
    del a, b
    assert wait_until(lambda: dm.leases() == [], 2) is not None


def test_quotas_are_refused_naming_tenant_and_limit(daemon):
    dm = daemon(alice_extra="max_sessions = 1", bob_extra='max_memory = "1KiB"')
    rt = dm.connect(ALICE)
    m = rt.compile(zoo("mlp.onnx"), profile=False, measure=False)
    with pytest.raises(tessera.ResourceExhausted, match="tenant 'alice' asks for 2 vEU.*max_veus is 1"):
        m.session(veus=2)
    s = m.session()
    with pytest.raises(tessera.ResourceExhausted, match="max_sessions is 1"):
        m.session()
    with pytest.raises(tessera.ResourceExhausted, match="tenant 'bob' would use .* max_memory is 1024"):
        dm.connect(BOB).compile(zoo("mlp.onnx"), profile=False, measure=False).session()
    with pytest.raises(tessera.InvalidArgument, match="chooses a session's cores"):
        m.session(cores=[0])
    del s


def test_killed_client_loses_its_lease_within_a_second(daemon):
    dm = daemon(lease_timeout=10)
    p = start_client(dm, ALICE)
    # Another tenant runs throughout.
    other = dm.connect(BOB).compile(zoo("mlp.onnx"), profile=False, measure=False).session()
    feeds = inputs_of("mlp")
    want = other.run(feeds)["output"]
    assert sorted(v["tenant"] for v in dm.leases()) == ["alice", "bob"]
    p.kill()  # mid-run: it runs ResNet-18 in a loop
    t0 = time.monotonic()
    gone = None
    while time.monotonic() - t0 < 1.0 and gone is None:
        np.testing.assert_array_equal(other.run(feeds)["output"], want)
        if [v["tenant"] for v in dm.leases()] == ["bob"]:
            gone = time.monotonic() - t0
    p.wait()
    assert gone is not None, "the lease outlived its client by more than 1 s"
    print(f"\nlease reclaimed {1e3 * gone:.1f} ms after kill -9")
    faults = [f for f in dm.connect(ROOT).faults() if f["kind"] == "client_died"]
    assert len(faults) == 1 and faults[0]["tenant"] == "alice" and f"pid {p.pid}" in faults[0]["message"]


def test_silent_client_is_reclaimed_after_its_lease_timeout(daemon):
    # Heartbeats go every quarter of the timeout: the lease must outlive the
    # stop by at least half of it (a loaded host may delay one heartbeat),
    # and go within a few timeouts.
    dm = daemon(lease_timeout=2.0)
    p = start_client(dm, ALICE)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        took = wait_until(lambda: dm.leases() == [], 8.0)
        assert took is not None and took >= 1.0, took
        assert any(f["kind"] == "lease_expired" for f in dm.connect(ROOT).faults())
    finally:
        os.kill(p.pid, signal.SIGKILL)
        os.kill(p.pid, signal.SIGCONT)
        p.wait()


# ----------------------------------------------------------------- hostile ---

def test_hostile_and_forged_requests_are_refused_and_the_daemon_lives(daemon, tmp_path):
    pb = protocol_module(str(tmp_path))
    dm = daemon()
    before = len(dm.connect(ROOT).faults())

    def reply_of(data):
        n = struct.unpack("<I", data[:4])[0]
        r = pb.Reply()
        r.ParseFromString(data[4:4 + n])
        return r

    rng = np.random.default_rng(0)
    # Random bytes, an oversized length, a truncated frame, a frame that is no message.
    for blob in [rng.bytes(100) for _ in range(20)] + [struct.pack("<I", 1 << 30) + b"x" * 10,
                                                       struct.pack("<I", 100) + b"x" * 10,
                                                       struct.pack("<I", 3) + b"\xff\xff\xff"]:
        raw(dm, blob)
    # A request before Hello; a Hello of another version.
    req = pb.Request(id=1)
    req.status.SetInParent()
    r = reply_of(raw(dm, frame(req)))
    assert r.code != 0 and "first request on a connection must be Hello" in r.message
    hello = pb.Request(id=1)
    hello.hello.version = 99
    hello.hello.token = ALICE
    r = reply_of(raw(dm, frame(hello)))
    assert r.code != 0 and "protocol version 1; the client speaks 99" in r.message
    # Releasing a lease of another tenant's, and an unknown one.
    s = dm.connect(BOB).compile(zoo("mlp.onnx"), profile=False, measure=False).session()
    bobs = dm.leases()[0]["lease"]
    hello.hello.version = 1
    for lease in (bobs, 12345):
        rel = pb.Request(id=2)
        rel.release.lease = lease
        data = raw(dm, frame(hello) + frame(rel))
        n = struct.unpack("<I", data[:4])[0]
        r = reply_of(data[4 + n:])
        assert r.id == 2 and r.code != 0 and f"no lease {lease} on this connection" in r.message
    assert [v["lease"] for v in dm.leases()] == [bobs]  # untouched
    del s
    faults = dm.connect(ROOT).faults()[before:]
    kinds = [f["kind"] for f in faults]
    assert kinds.count("refused_request") >= 3 and "bad_message" in kinds, kinds
    assert dm.proc.poll() is None


def test_faults_survive_a_restart_and_admins_clear_them(daemon):
    dm = daemon()
    with pytest.raises(tessera.PermissionDenied):
        dm.connect("nope")
    ids = [f["id"] for f in dm.connect(ROOT).faults()]
    assert len(ids) == 1
    dm.stop()
    assert not os.path.exists(dm.uri[len("unix://"):])
    dm2 = daemon()
    assert [f["id"] for f in dm2.connect(ROOT).faults()] == ids
    with pytest.raises(tessera.PermissionDenied, match="not an admin"):
        dm2.connect(ALICE).clear_fault(ids[0])
    dm2.connect(ROOT).clear_fault(ids[0])
    assert dm2.connect(ROOT).faults() == []
    with pytest.raises(tessera.NotFound):
        dm2.connect(ROOT).clear_fault(ids[0])


def test_cli_status_and_run_through_the_daemon(daemon):
    dm = daemon()
    env = dict(os.environ, TESSERA_CONNECT=dm.uri, TESSERA_TOKEN=ROOT)
    out = subprocess.run([TESSERA, "status", "--json"], env=env, capture_output=True, text=True, check=True)
    st = json.loads(out.stdout)
    assert st["tenant"] == "root" and st["admin"] and {t["name"] for t in st["tenants"]} == {"alice", "bob", "carol", "root"}
    for t in st["tenants"]:
        assert {"name", "mode", "sessions", "veus", "memory_bytes"} <= set(t)
    run = subprocess.run([TESSERA, "run", zoo("mlp.onnx"), "--iters", "3", "--json", "--quiet", "--no-profile",
                          "--no-measure"], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert len(json.loads(run.stdout)["runs"]) == 3
    bad = subprocess.run([TESSERA, "status", "--connect", dm.uri, "--token", "nope"], capture_output=True, text=True)
    assert bad.returncode != 0 and "no tenant has this token" in bad.stderr


# -------------------------------------------------------------------- cloud ---

def test_cloud_and_appliance_tenants_at_once_match_embedded_on_disjoint_cores(daemon):
    dm = daemon()
    feeds = inputs_of("resnet18")
    want = tessera.connect().compile(zoo("resnet18.onnx"), profile=False, measure=False).session(veus=1).run(feeds)
    cloud = dm.connect(CAROL).compile(zoo("resnet18.onnx"))
    assert [n for n, _, _ in cloud.inputs] == list(feeds)
    c = cloud.session()
    a = dm.connect(ALICE).compile(zoo("resnet18.onnx"), profile=False, measure=False).session()
    leases = dm.leases()
    assert sorted(v["tenant"] for v in leases) == ["alice", "carol"]
    assert set(leases[0]["cores"]).isdisjoint(leases[1]["cores"])
    results = {}

    def go(name, s):
        results[name] = [s.run(feeds) for _ in range(3)]

    import threading
    ts = [threading.Thread(target=go, args=(n, s)) for n, s in (("cloud", c), ("appliance", a))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for name in ("cloud", "appliance"):
        for got in results[name]:
            np.testing.assert_allclose(got["output"], want["output"], rtol=1e-4, atol=1e-5)
    # The cloud session ran in the daemon's worker: the client copied its
    # input out and the output in, and has no Plan of its own.
    assert c.last_breakdown["copy_in_bytes"] == feeds["input"].nbytes
    with pytest.raises(tessera.FailedPrecondition, match="cloud tenant"):
        cloud.save(os.path.join(dm.dir, "x.tsx"))
    del c, a
    assert wait_until(lambda: dm.leases() == [], 2) is not None


def test_a_crashed_worker_is_that_sessions_alone_and_restarts(daemon, tmp_path):
    pb = protocol_module(str(tmp_path))
    dm = daemon(fault_injection=True)
    feeds = inputs_of("mlp")
    want = tessera.connect().compile(zoo("mlp.onnx"), profile=False, measure=False).session(veus=1).run(feeds)
    other = dm.connect(ALICE).compile(zoo("mlp.onnx"), profile=False, measure=False).session()
    raw_client, session = open_raw_session(dm, pb, "mlp")
    r = raw_client.run(session, feeds)
    assert r.code == 0, r.message
    close = dict(rtol=1e-5, atol=1e-6)  # the worker's Plan may sum in another order
    np.testing.assert_allclose(np.frombuffer(r.result.outputs[0].data, np.float32).reshape(want["output"].shape),
                               want["output"], **close)
    for how, signame in ((0, "SIGSEGV"), (1, "SIGSYS")):  # a fault; a system call the sandbox forbids
        crash = pb.Request()
        crash.crash.session = session
        crash.crash.how = how
        assert raw_client.call(crash).code == 0
        errors, ok = 0, None
        deadline = time.monotonic() + 30
        while ok is None and time.monotonic() < deadline:
            r = raw_client.run(session, feeds)
            if r.code == 0:
                ok = r
            else:
                errors += 1
                assert "worker" in r.message, r.message
            other.run(feeds)  # the other tenant runs throughout
        assert errors >= 1 and ok is not None
        np.testing.assert_allclose(np.frombuffer(ok.result.outputs[0].data, np.float32).reshape(want["output"].shape),
                                   want["output"], **close)
        crashes = [f for f in dm.connect(ROOT).faults() if f["kind"] == "worker_crash"]
        assert crashes and crashes[-1]["tenant"] == "carol" and signame in crashes[-1]["message"], crashes
    assert dm.proc.poll() is None


def test_fault_injection_is_off_unless_the_config_says(daemon, tmp_path):
    pb = protocol_module(str(tmp_path))
    dm = daemon()
    raw_client, session = open_raw_session(dm, pb, "mlp")
    crash = pb.Request()
    crash.crash.session = session
    r = raw_client.call(crash)
    assert r.code != 0 and "fault injection is off" in r.message


def test_cloud_requests_are_validated(daemon, tmp_path):
    pb = protocol_module(str(tmp_path))
    dm = daemon()
    feeds = inputs_of("mlp")
    raw_client, session = open_raw_session(dm, pb, "mlp")
    # Another connection's session, an unknown one.
    intruder, theirs = Raw(dm, pb, CAROL), session
    r = intruder.run(theirs, feeds)
    assert r.code != 0 and f"no session {theirs} on this connection" in r.message
    # Wrong dtype, wrong shape, missing bytes, an extra input, none at all.
    r = raw_client.run(session, feeds, dtype=4)
    assert r.code != 0 and "input 'input' must be float32 16x784" in r.message
    r = raw_client.run(session, {"input": feeds["input"][:8]})
    assert r.code != 0 and "must be float32 16x784" in r.message
    r = raw_client.run(session, feeds, drop_bytes=4)
    assert r.code != 0 and "bytes; its dtype and shape make" in r.message
    r = raw_client.run(session, dict(feeds, extra=feeds["input"]))
    assert r.code != 0 and "input(s)" in r.message
    r = raw_client.run(session, {})
    assert r.code != 0
    # The daemon's own fields in SessionOpen; a model never loaded.
    req = pb.Request()
    req.open.model = "0" * 64
    assert "no model" in raw_client.call(req).message
    req = pb.Request()
    with open(zoo("mlp.onnx"), "rb") as f:
        req.load.model = f.read()
    model = raw_client.call(req).loaded.model
    req = pb.Request()
    req.open.model = model
    req.open.model_path = "/etc/shadow"
    assert "the daemon's to set" in raw_client.call(req).message
    # A model that is not one: refused by the worker that inspected it.
    req = pb.Request()
    req.load.model = b"not an onnx model"
    r = raw_client.call(req)
    assert r.code != 0
    # And still serving.
    assert raw_client.run(session, feeds).code == 0
    kinds = [f["kind"] for f in dm.connect(ROOT).faults()]
    assert kinds.count("refused_request") >= 6, kinds


def test_killed_cloud_client_loses_its_session_and_worker(daemon):
    dm = daemon(lease_timeout=10)
    p = start_client(dm, CAROL)
    assert [v["tenant"] for v in dm.leases()] == ["carol"]
    p.kill()  # mid-run, through the rings
    took = wait_until(lambda: dm.leases() == [], 1.0)
    p.wait()
    assert took is not None
    print(f"\ncloud session reclaimed {1e3 * took:.1f} ms after kill -9")
    assert any(f["kind"] == "client_died" and f["tenant"] == "carol" for f in dm.connect(ROOT).faults())
