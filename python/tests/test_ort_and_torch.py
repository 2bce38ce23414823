"""ONNX Runtime's shape (code that used ORT runs by changing the import) and
PyTorch modules compiled in one line."""
import numpy as np
import pytest

import tessera
from conftest import load, rel_l2, zoo

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["mlp", "bert_tiny", "resnet18"])
def test_inference_session_has_onnx_runtimes_shape(rt, name):
    sess = tessera.InferenceSession(zoo(name + ".onnx"))
    feeds = load(name + ".inputs.npz")
    want = load(name + ".outputs.npz")
    ins, outs = sess.get_inputs(), sess.get_outputs()
    assert [i.name for i in ins] == list(feeds)
    assert all(i.type.startswith("tensor(") for i in ins + outs)
    for i in ins:
        assert len(i.shape) == feeds[i.name].ndim
    got = sess.run(None, feeds)
    assert len(got) == len(outs)
    for o, g in zip(outs, got):
        assert rel_l2(g, want[o.name]) <= 1e-4
    first = sess.run([outs[0].name], feeds)
    np.testing.assert_array_equal(first[0], got[0])
    with pytest.raises(tessera.NotFound, match="no output named 'nope'"):
        sess.run(["nope"], feeds)


def _check_module(module, example, tol=1e-4):
    module = module.eval()
    with torch.no_grad():
        want = module(*example)
    f = tessera.compile_module(module, example, veus=2, profile=False, measure=False)
    got = f(*example)
    if isinstance(want, tuple):
        want, got = want[0], got[0]
    assert isinstance(got, torch.Tensor)
    assert got.shape == want.shape
    assert rel_l2(got.numpy(), want.numpy()) <= tol


def test_compile_module_resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    _check_module(torchvision.models.resnet18(weights=None), (torch.randn(1, 3, 224, 224),))


class _Block(torch.nn.Module):
    """A small transformer encoder block: self-attention, then a feed-forward
    layer, each with a residual and a LayerNorm."""

    def __init__(self, d=64, heads=4, ff=128):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, ff), torch.nn.GELU(), torch.nn.Linear(ff, d))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, self.dh).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / self.dh ** 0.5, dim=-1) @ v
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.ff(x))


def test_compile_module_transformer():
    torch.manual_seed(0)
    _check_module(torch.nn.Sequential(_Block(), _Block()), (torch.randn(1, 16, 64),))


class _Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(32, 64, num_layers=2)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[-1])


def test_compile_module_lstm():
    torch.manual_seed(0)
    _check_module(_Lstm(), (torch.randn(12, 1, 32),))
