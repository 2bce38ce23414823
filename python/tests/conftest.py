"""Shared fixtures: the zoo (TESSERA_ZOO, else build/zoo) and a quick compile."""
import os

import numpy as np
import pytest

import tessera

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO = os.environ.get("TESSERA_ZOO", os.path.join(ROOT, "build", "zoo"))


def zoo(name):
    return os.path.join(ZOO, name)


def zoo_models():
    """Every zoo model with its inputs and PyTorch's outputs beside it."""
    names = []
    for f in sorted(os.listdir(ZOO)):
        if f.endswith(".onnx"):
            m = f[:-5]
            if os.path.exists(zoo(m + ".inputs.npz")) and os.path.exists(zoo(m + ".outputs.npz")):
                names.append(m)
    return names


def load(name):
    with np.load(zoo(name)) as z:
        return {k: z[k] for k in z.files}


def rel_l2(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


@pytest.fixture(scope="session")
def rt():
    tessera.set_log_level("warning")
    return tessera.connect()


@pytest.fixture(scope="session")
def quick():
    """Compile options that measure nothing on this host."""
    return dict(profile=False, measure=False)
