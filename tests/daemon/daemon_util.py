"""What the tesserad tests share: a daemon started on a socket in a temporary
directory and stopped by its pid, its config, raw clients of its protocol."""
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


def zoo(name):
    return os.path.join(ZOO, name)


def wait_until(pred, limit_s):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


# A client that runs a session until it is killed.
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


def inputs_of(name):
    with np.load(zoo(name + ".inputs.npz")) as z:
        return {k: z[k] for k in z.files}


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
