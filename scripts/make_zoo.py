#!/usr/bin/python3
"""Export Tessera's model zoo from PyTorch, with PyTorch reference outputs.

Every model gets random weights from a fixed seed (BatchNorm statistics and
affine parameters are random too, not the defaults) and is exported with
torch.onnx.export at opset 17. For MODEL, writes into the output folder:

  MODEL.onnx           the model
  MODEL.inputs.npz     its inputs, by input name
  MODEL.outputs.npz    PyTorch's outputs for them, by output name

Usage: /usr/bin/python3 scripts/make_zoo.py [--out build/zoo] [--only NAME,...]
                                            [--list] [--force]
Models already present are skipped unless --force.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17


def randomize_norms(model, gen):
    """Non-default BatchNorm statistics and affine parameters."""
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            c = m.num_features
            m.running_mean.copy_(torch.rand(c, generator=gen) * 0.2 - 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(c, generator=gen) * 0.2 - 0.1)
        elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
            n = m.weight.numel()
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.bias.shape, generator=gen) * 0.2 - 0.1)
            del n


# ----------------------------------------------------------------- models ---

def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None), {"input": torch.randn(1, 3, 224, 224)}, None


def mobilenet_v2():
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None), {"input": torch.randn(1, 3, 224, 224)}, None


class TinyBert(nn.Module):
    """A 2-layer BERT-style encoder: d=128, 2 heads, seq 64, GELU (erf)."""

    def __init__(self, vocab=1000, d=128, heads=2, layers=2, ffn=512, seq=64):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.ln0 = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict({
                "qkv": nn.Linear(d, 3 * d), "out": nn.Linear(d, d), "ln1": nn.LayerNorm(d, eps=1e-12),
                "ff1": nn.Linear(d, ffn), "ff2": nn.Linear(ffn, d), "ln2": nn.LayerNorm(d, eps=1e-12)}))
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, attention_mask):
        b, s = input_ids.shape
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln0(self.tok(input_ids) + self.pos(pos))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        d = x.shape[-1]
        hd = d // self.heads
        for layer in self.layers:
            q, k, v = layer["qkv"](x).split(d, dim=-1)
            q = q.view(b, s, self.heads, hd).transpose(1, 2)
            k = k.view(b, s, self.heads, hd).transpose(1, 2)
            v = v.view(b, s, self.heads, hd).transpose(1, 2)
            att = torch.matmul(q, k.transpose(-1, -2)) / (hd ** 0.5) + mask
            att = F.softmax(att, dim=-1)
            ctx = torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)
            x = layer["ln1"](x + layer["out"](ctx))
            x = layer["ln2"](x + layer["ff2"](F.gelu(layer["ff1"](x))))
        return x, torch.tanh(self.pool(x[:, 0]))


def bert_tiny():
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, 1000, (1, 64), generator=gen)
    mask = torch.ones(1, 64, dtype=torch.int64)
    mask[0, 50:] = 0
    return TinyBert(), {"input_ids": ids, "attention_mask": mask}, {"input_ids": {0: "batch", 1: "seq"},
                                                                    "attention_mask": {0: "batch", 1: "seq"}}


class LstmTC(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(256, 256, num_layers=10)

    def forward(self, x):
        y, _ = self.lstm(x)
        return y


def lstm_tc():
    return LstmTC(), {"input": torch.randn(100, 1, 256)}, None


class SepConv(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.dw = nn.Conv2d(c, c, k, padding=k // 2, groups=c, bias=False)
        self.pw = nn.Conv2d(c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(self.pw(self.dw(F.relu(x))))


class Cell(nn.Module):
    """Five branches (separable convs, pooling, identity) combined pairwise by
    addition, then concatenated and projected back to c channels."""

    def __init__(self, c):
        super().__init__()
        self.s3a, self.s5a, self.s3b, self.s5b, self.s3c = (SepConv(c, 3), SepConv(c, 5), SepConv(c, 3),
                                                             SepConv(c, 5), SepConv(c, 3))
        self.proj = nn.Conv2d(5 * c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x, prev):
        b0 = self.s3a(x) + self.s5a(prev)
        b1 = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False) + self.s3b(prev)
        b2 = F.max_pool2d(prev, 3, 1, 1) + x
        b3 = self.s5b(x) + F.avg_pool2d(prev, 3, 1, 1, count_include_pad=False)
        b4 = self.s3c(x) + x
        return self.bn(self.proj(F.relu(torch.cat([b0, b1, b2, b3, b4], 1))))


class NasNetLike(nn.Module):
    def __init__(self, c=32, cells=6, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
        self.cells = nn.ModuleList([Cell(c) for _ in range(cells)])
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        prev = x = self.stem(x)
        for cell in self.cells:
            x, prev = cell(x, prev), x
        x = F.adaptive_avg_pool2d(F.relu(x), 1).flatten(1)
        return self.fc(x)


def nasnet_like():
    return NasNetLike(), {"input": torch.randn(1, 3, 32, 32)}, None


def mlp():
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10),
                          nn.LogSoftmax(dim=-1))
    return model, {"input": torch.randn(16, 784)}, None


class AddChain(nn.Module):
    """x + c_1 + ... + c_n, each c_i its own constant (no CSE can merge them)."""

    def __init__(self, n, width=64):
        super().__init__()
        self.consts = nn.Parameter(torch.randn(n, 1, width) * 0.01, requires_grad=False)

    def forward(self, x):
        for i in range(self.consts.shape[0]):
            x = x + self.consts[i]
        return x


class AddChains(nn.Module):
    def __init__(self, chains=8, length=125, width=64):
        super().__init__()
        self.chains = nn.ModuleList([AddChain(length, width) for _ in range(chains)])

    def forward(self, x):
        outs = [c(x) for c in self.chains]
        total = outs[0]
        for o in outs[1:]:
            total = total + o
        return total


def add_chain():
    return AddChain(1000), {"input": torch.randn(1, 64)}, None


def add_chains8():
    return AddChains(), {"input": torch.randn(1, 64)}, None


MODELS = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "bert_tiny": bert_tiny,
    "lstm_tc": lstm_tc,
    "nasnet_like": nasnet_like,
    "mlp": mlp,
    "add_chain": add_chain,
    "add_chains8": add_chains8,
}


def export(name, out_dir, seed=0):
    torch.manual_seed(seed)
    model, inputs, dynamic = MODELS[name]()
    gen = torch.Generator().manual_seed(seed + 1)
    randomize_norms(model, gen)
    model.eval()
    names = list(inputs.keys())
    args = tuple(inputs[k] for k in names)
    with torch.no_grad():
        outs = model(*args)
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    out_names = ["output"] if len(outs) == 1 else [f"output{i}" for i in range(len(outs))]
    path = os.path.join(out_dir, name + ".onnx")
    # Constant folding off: the exported graph keeps the Shape/Gather/Concat
    # chains and weight transposes that Tessera's own passes must handle.
    torch.onnx.export(model, args, path, opset_version=OPSET, input_names=names, output_names=out_names,
                      dynamic_axes=dynamic, do_constant_folding=False)
    np.savez(os.path.join(out_dir, name + ".inputs.npz"), **{k: v.numpy() for k, v in inputs.items()})
    np.savez(os.path.join(out_dir, name + ".outputs.npz"), **{k: v.numpy() for k, v in zip(out_names, outs)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/zoo", help="output folder (default build/zoo)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--force", action="store_true", help="re-export models already present")
    a = ap.parse_args()
    if a.list:
        print("\n".join(MODELS))
        return 0
    names = [n for n in a.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"make_zoo: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(2)
    for n in names:
        done = all(os.path.exists(os.path.join(a.out, n + s)) for s in (".onnx", ".inputs.npz", ".outputs.npz"))
        if done and not a.force:
            continue
        t0 = time.time()
        export(n, a.out)
        print(f"make_zoo: {n} ({time.time() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
