#!/usr/bin/python3
"""Export Tessera's model zoo from PyTorch, with PyTorch reference outputs.

Every model gets random weights from a fixed seed (BatchNorm statistics and
affine parameters are random too, not the defaults) and is exported with
torch.onnx.export at opset 17. For MODEL, writes into the output folder:

  MODEL.onnx           the model
  MODEL.inputs.npz     its inputs, by input name
  MODEL.outputs.npz    PyTorch's outputs for them, by output name

Usage: /usr/bin/python3 scripts/make_zoo.py [--out build/zoo] [--only NAME,...]
                                            [--set zoo|extra] [--opset N] [--suffix S]
                                            [--list] [--force] [--jobs N]
Models already present are skipped unless --force. Models export in N worker
processes at once (default: 2, or 1 on a single core), each PyTorch on one
thread; the largest take most of the time (ViT-B/16: about 40 s).
"""
import argparse
import concurrent.futures
import inspect
import multiprocessing
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
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.bias.shape, generator=gen) * 0.2 - 0.1)
        elif isinstance(m, (nn.Linear, nn.Conv2d)) and not m.weight.detach().any():
            # Zero-initialized heads (torchvision's ViT) would make every
            # output 0 and every comparison trivially exact.
            m.weight.data.copy_(torch.randn(m.weight.shape, generator=gen) * 0.02)


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


# ----------------------------------------------------- the "extra" set ---
# Models outside the zoo proper, of the same kinds: torchvision CNNs,
# transformers and RNNs as torch.onnx.export emits them. Checked by
# `make zoo-extra-test`.

def _tv(name, size=224, **kw):
    def make():
        import torchvision
        model = getattr(torchvision.models, name)(weights=None, **kw)
        return model, {"input": torch.randn(1, 3, size, size)}, None
    return make


class Encoder(nn.Module):
    """nn.TransformerEncoder, batch first, with a padding mask."""

    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=128, dropout=0.0, batch_first=True,
                                           activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x, pad):
        return self.enc(x, src_key_padding_mask=pad)


def transformer_encoder():
    pad = torch.zeros(2, 12, dtype=torch.bool)
    pad[1, 9:] = True
    return Encoder(), {"x": torch.randn(2, 12, 64), "pad": pad}, None


class Mha(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, q, kv):
        out, w = self.mha(q, kv, kv)
        return out, w


def multihead_attention():
    return Mha(), {"q": torch.randn(2, 5, 32), "kv": torch.randn(2, 7, 32)}, None


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerDecoderLayer(48, 4, dim_feedforward=96, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.dec = nn.TransformerDecoder(layer, 2)

    def forward(self, tgt, memory):
        mask = torch.triu(torch.full((tgt.shape[1], tgt.shape[1]), float("-inf")), diagonal=1)
        return self.dec(tgt, memory, tgt_mask=mask)


def transformer_decoder():
    return Decoder(), {"tgt": torch.randn(1, 6, 48), "memory": torch.randn(1, 9, 48)}, None


class Rnn(nn.Module):
    def __init__(self, kind, **kw):
        super().__init__()
        self.rnn = getattr(nn, kind)(**kw)

    def forward(self, x):
        out = self.rnn(x)
        return out[0]


def gru_bidirectional():
    return Rnn("GRU", input_size=20, hidden_size=32, num_layers=2, bidirectional=True, batch_first=True), \
        {"input": torch.randn(3, 15, 20)}, None


def lstm_bidirectional():
    return Rnn("LSTM", input_size=16, hidden_size=24, num_layers=2, bidirectional=True), \
        {"input": torch.randn(11, 2, 16)}, None


class CharLM(nn.Module):
    """Embedding -> GRU -> Linear, as in a small character language model."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.out = nn.Linear(64, 100)

    def forward(self, ids):
        h, _ = self.gru(self.emb(ids))
        return F.log_softmax(self.out(h), dim=-1)


def char_lm():
    return CharLM(), {"ids": torch.randint(0, 100, (2, 20))}, None


class UNetTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.d2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.u1 = nn.Sequential(nn.Conv2d(32, 16, 3, padding=1), nn.InstanceNorm2d(16, affine=True), nn.LeakyReLU(0.1))
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        u = F.interpolate(b, scale_factor=2, mode="bilinear", align_corners=False)
        c = self.u1(torch.cat([self.up(b) + u[:, :16], a], 1))
        return torch.sigmoid(self.head(c))


def unet_tiny():
    return UNetTiny(), {"input": torch.randn(1, 3, 32, 32)}, None


EXTRA = {
    "alexnet": _tv("alexnet"),
    "vgg11": _tv("vgg11"),
    "squeezenet1_0": _tv("squeezenet1_0"),
    "densenet121": _tv("densenet121"),
    "googlenet": _tv("googlenet", aux_logits=False, init_weights=True),
    "inception_v3": _tv("inception_v3", 299, aux_logits=False, init_weights=True),
    "shufflenet_v2_x1_0": _tv("shufflenet_v2_x1_0"),
    "mnasnet0_5": _tv("mnasnet0_5"),
    "mobilenet_v3_small": _tv("mobilenet_v3_small"),
    "efficientnet_b0": _tv("efficientnet_b0"),
    "regnet_x_400mf": _tv("regnet_x_400mf"),
    "resnext50_32x4d": _tv("resnext50_32x4d"),
    "convnext_tiny": _tv("convnext_tiny"),
    "vit_b_16": _tv("vit_b_16"),
    "swin_t": _tv("swin_t"),
    "transformer_encoder": transformer_encoder,
    "transformer_decoder": transformer_decoder,
    "multihead_attention": multihead_attention,
    "gru_bidirectional": gru_bidirectional,
    "lstm_bidirectional": lstm_bidirectional,
    "char_lm": char_lm,
    "unet_tiny": unet_tiny,
}

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


def export(name, out_dir, seed=0, opset=OPSET, suffix=""):
    torch.manual_seed(seed)
    model, inputs, dynamic = {**MODELS, **EXTRA}[name]()
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
    stem = name + suffix
    path = os.path.join(out_dir, stem + ".onnx")
    # Constant folding off: the exported graph keeps the Shape/Gather/Concat
    # chains and weight transposes that Tessera's own passes must handle.
    # The TorchScript exporter, which newer PyTorch keeps behind dynamo=False.
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    torch.onnx.export(model, args, path, opset_version=opset, input_names=names, output_names=out_names,
                      dynamic_axes=dynamic, do_constant_folding=False, **legacy)
    np.savez(os.path.join(out_dir, stem + ".inputs.npz"), **{k: v.numpy() for k, v in inputs.items()})
    np.savez(os.path.join(out_dir, stem + ".outputs.npz"), **{k: v.numpy() for k, v in zip(out_names, outs)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/zoo", help="output folder (default build/zoo)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--force", action="store_true", help="re-export models already present")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="models exported at once, each in its own process (default: 2, or 1 on one core)")
    ap.add_argument("--opset", type=int, default=OPSET, help=f"ONNX opset to export at (default {OPSET})")
    ap.add_argument("--suffix", default="", help="appended to file names, e.g. _opset11")
    ap.add_argument("--set", choices=["zoo", "extra"], default="zoo",
                    help="zoo: the models the tests require; extra: more models of the same kinds")
    a = ap.parse_args()
    catalog = MODELS if a.set == "zoo" else EXTRA
    if a.list:
        print("\n".join(catalog))
        return 0
    names = [n for n in a.only.split(",") if n] or list(catalog)
    unknown = [n for n in names if n not in MODELS and n not in EXTRA]
    if unknown:
        print(f"make_zoo: unknown model(s) {', '.join(unknown)}; known: {', '.join(list(MODELS) + list(EXTRA))}",
              file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    todo = [n for n in names if a.force or not all(
        os.path.exists(os.path.join(a.out, n + a.suffix + s)) for s in (".onnx", ".inputs.npz", ".outputs.npz"))]
    jobs = max(1, min(a.jobs, len(todo)))
    if jobs == 1:
        torch.set_num_threads(2)
        for n in todo:
            print(_timed_export(n, a.out, a.opset, a.suffix), file=sys.stderr)
        return 0
    # Fresh interpreters (spawn), not forks of this one with PyTorch's
    # thread pools started.
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=torch.set_num_threads, initargs=(1,)) as pool:
        futures = {pool.submit(_timed_export, n, a.out, a.opset, a.suffix): n for n in todo}
        failed = []
        for f in concurrent.futures.as_completed(futures):
            try:
                print(f.result(), file=sys.stderr)
            except Exception as e:  # noqa: BLE001 - reported by model, then the exit status says it
                print(f"make_zoo: {futures[f]}{a.suffix} failed: {type(e).__name__}: {e}", file=sys.stderr)
                failed.append(futures[f])
    if failed:
        print(f"make_zoo: {len(failed)} model(s) not exported: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _timed_export(name, out_dir, opset, suffix):
    t0 = time.time()
    export(name, out_dir, opset=opset, suffix=suffix)
    return f"make_zoo: {name}{suffix} ({time.time() - t0:.1f} s)"


if __name__ == "__main__":
    sys.exit(main())
