"""tesserad from its clients' side: config errors, authentication, appliance
leases and quotas, reclaim of a client killed or gone silent, hostile and
forged requests, faults that survive a restart. Each test starts its own
daemon on a socket in a temporary directory and stops it by its pid."""
import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest

# What the tests measure (the host map) stays out of the user's cache.
if "TESSERA_CACHE" not in os.environ:
    os.environ["TESSERA_CACHE"] = tempfile.mkdtemp(prefix="tesserad-test-cache-")
    atexit.register(shutil.rmtree, os.environ["TESSERA_CACHE"], True)
import tessera  # noqa: E402

BUILD = os.environ.get("TESSERA_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
TESSERAD = os.path.join(BUILD, "bin", "tesserad")
TESSERA = os.path.join(BUILD, "bin", "tessera")
ZOO = os.path.join(BUILD, "zoo")
ALICE, BOB, ROOT, CAROL = "alice-token", "bob-token", "root-token", "carol-token"
# The cores this process may use, before a session it runs pins it.
CORES = os.sched_getaffinity(0)


def sha(t):
    return hashlib.sha256(t.encode()).hexdigest()


# Leases are given back when a session or connection closes; the timeout
# reclaims only a client that stays silent. Tests that are not about it
# give clients 10 s: under `ctest -j2` a client's thread was once starved
# for more than a second and lost its lease mid-test.
def config_text(d, lease_timeout=10.0, alice_extra="", bob_extra="", fault_injection=False, metrics=""):
    return textwrap.dedent(f"""\
        [daemon]
        {f'metrics = "{metrics}"' if metrics else ""}
        socket = "{d}/d.sock"
        state_dir = "{d}/state"
        lease_timeout_s = {lease_timeout}

        [[tenant]]
        name = "alice"
        token_sha256 = "{sha(ALICE)}"
        max_veus = 1
        {alice_extra}

        [[tenant]]
        name = "bob"
        token_sha256 = "{sha(BOB)}"
        max_veus = 1
        {bob_extra}

        [[tenant]]
        name = "carol"
        token_sha256 = "{sha(CAROL)}"
        mode = "cloud"
        max_veus = 1

        [[tenant]]
        name = "root"
        token_sha256 = "{sha(ROOT)}"
        admin = true
        max_veus = 2

        [testing]
        fault_injection = {"true" if fault_injection else "false"}
        """)


class Daemon:
    def __init__(self, d, text):
        self.dir = d
        self.config = os.path.join(d, "t.toml")
        with open(self.config, "w") as f:
            f.write(text)
        self.uri = f"unix://{d}/d.sock"
        self.log = open(os.path.join(d, "tesserad.log"), "ab")
        # The daemon hands out the cores of its affinity mask; this process
        # may have been pinned by a session it ran (vEU 0 is the caller).
        self.proc = subprocess.Popen([TESSERAD, "--config", self.config], stderr=self.log,
                                     preexec_fn=lambda: os.sched_setaffinity(0, CORES))
        deadline = time.monotonic() + 30
        while not os.path.exists(f"{d}/d.sock"):
            assert self.proc.poll() is None, open(os.path.join(d, "tesserad.log")).read()
            assert time.monotonic() < deadline, "tesserad did not start in 30 s"
            time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=10)
            assert rc == 0
        self.log.close()

    def connect(self, token, **kw):
        return tessera.connect(self.uri, token=token, **kw)

    def status(self):
        return self.connect(ROOT).status()

    def leases(self):
        return self.status()["devices"][0]["vdevices"]


@pytest.fixture
def daemon():
    d = tempfile.mkdtemp(prefix="tesserad-test-")
    started = []

    def start(**kw):
        dm = Daemon(d, config_text(d, **kw))
        started.append(dm)
        return dm

    yield start
    for dm in started:
        dm.stop()
    shutil.rmtree(d, ignore_errors=True)


def zoo(name):
    return os.path.join(ZOO, name)


def wait_until(pred, limit_s):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


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


CLIENT = textwrap.dedent("""\
    import sys, time, numpy as np, tessera
    rt = tessera.connect(sys.argv[1], token=sys.argv[2])
    s = rt.compile(sys.argv[3]).session()
    feeds = {k: v for k, v in np.load(sys.argv[4]).items()}
    s.run(feeds)
    print("ready", flush=True)
    while True:  # killed mid-run, or stopped
        s.run(feeds)
    """)


def start_client(dm, token):
    p = subprocess.Popen([sys.executable, "-c", CLIENT, dm.uri, token, zoo("resnet18.onnx"), zoo("resnet18.inputs.npz")],
                         stdout=subprocess.PIPE,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert p.stdout.readline().strip() == b"ready"
    return p


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

def protocol_module(tmp):
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    subprocess.run(["protoc", f"--python_out={tmp}", f"-I{src}", os.path.join(src, "daemon", "protocol.proto")], check=True)
    sys.path.insert(0, tmp)
    from daemon import protocol_pb2  # noqa: E402
    return protocol_pb2


def raw(dm, payload):
    """Sends bytes on a fresh connection; returns what came back before the daemon closed it."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(dm.uri[len("unix://"):])
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return got


def frame(msg):
    b = msg.SerializeToString()
    return struct.pack("<I", len(b)) + b


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

def inputs_of(name):
    with np.load(zoo(name + ".inputs.npz")) as z:
        return {k: z[k] for k in z.files}


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


class Raw:
    """A client speaking the protocol itself, for requests the library never sends."""

    def __init__(self, dm, pb, token):
        self.pb = pb
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(60)
        self.s.connect(dm.uri[len("unix://"):])
        self.id = 0
        hello = pb.Request()
        hello.hello.version = 1
        hello.hello.token = token
        assert self.call(hello).code == 0

    def call(self, req):
        self.id += 1
        req.id = self.id
        self.s.sendall(frame(req))
        head = self._exact(4)
        r = self.pb.Reply()
        r.ParseFromString(self._exact(struct.unpack("<I", head)[0]))
        assert r.id == self.id
        return r

    def _exact(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            assert chunk, "the daemon closed the connection"
            b += chunk
        return b

    def run(self, session, feeds, dtype=1, drop_bytes=0):
        req = self.pb.Request()
        req.run.session = session
        for k, v in feeds.items():
            t = req.run.inputs.add()
            t.name, t.dtype = k, dtype
            t.shape.extend(v.shape)
            t.data = v.tobytes()[drop_bytes:]
        return self.call(req)


def open_raw_session(dm, pb, name):
    raw_client = Raw(dm, pb, CAROL)
    req = pb.Request()
    with open(zoo(name + ".onnx"), "rb") as f:
        req.load.model = f.read()
    loaded = raw_client.call(req)
    assert loaded.code == 0, loaded.message
    req = pb.Request()
    req.open.model = loaded.loaded.model
    opened = raw_client.call(req)
    assert opened.code == 0, opened.message
    return raw_client, opened.opened.session


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
