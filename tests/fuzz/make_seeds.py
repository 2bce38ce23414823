#!/usr/bin/python3
"""Writes the fuzzers' seed corpora: small valid ONNX models into a folder,
or (--daemon OUT SRC) good request sequences for tesserad, whose first
byte (odd: a Hello is put first by the fuzzer) is followed by frames."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    seeds = {
        "conv": model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["c"], ["y"])], [f32("x", [1, 2, 5, 5])], [f32("y", [1, 4, 5, 5])], [w]),
        "reshape_chain": model([
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
            helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
            helper.make_node("Concat", ["d0u", "m1"], ["shape"], axis=0),
            helper.make_node("Reshape", ["x", "shape"], ["y"])],
            [f32("x", ["n", 3, 4])], [f32("y", None)],
            [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "m1")]),
        "matmul_softmax": model([helper.make_node("MatMul", ["x", "x2"], ["m"]),
                                 helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
                                [f32("x", [2, 3, 4]), f32("x2", [4, 5])], [f32("y", [2, 3, 5])]),
        "slice_pad_resize": model([
            helper.make_node("Slice", ["x", "st", "en"], ["s"]),
            helper.make_node("Pad", ["s", "pads"], ["p"], mode="reflect"),
            helper.make_node("Resize", ["p", "", "sc"], ["y"], mode="linear")],
            [f32("x", [1, 1, 6, 6])], [f32("y", None)],
            [numpy_helper.from_array(np.array([1, 1], np.int64), "st"),
             numpy_helper.from_array(np.array([5, 5], np.int64), "en"),
             numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")]),
    }
    for name, m in seeds.items():
        onnx.save(m, os.path.join(out, name + ".onnx"))


def daemon_seeds(out, src):
    import struct
    import subprocess
    import tempfile
    import atexit
    import shutil
    gen = tempfile.mkdtemp(prefix="tessera-seeds-")
    atexit.register(shutil.rmtree, gen, True)
    subprocess.run(["protoc", f"--python_out={gen}", f"-I{src}", os.path.join(src, "daemon", "protocol.proto")], check=True)
    sys.path.insert(0, gen)
    from daemon import protocol_pb2 as pb

    def frame(i, fill):
        r = pb.Request(id=i)
        fill(r)
        b = r.SerializeToString()
        return struct.pack("<I", len(b)) + b

    os.makedirs(out, exist_ok=True)
    seqs = {
        "status": [lambda r: r.status.SetInParent(), lambda r: r.faults.SetInParent(), lambda r: r.ping.SetInParent()],
        "lease": [lambda r: setattr(r.lease, "veus", 1), lambda r: setattr(r.release, "lease", 1),
                  lambda r: setattr(r.release, "lease", 7)],
        "run": [lambda r: setattr(r.load, "model", b"\x08\x07"), lambda r: setattr(r.open, "model", "0" * 64),
                lambda r: (setattr(r.run, "session", 1), r.run.inputs.add(name="x", dtype=1, shape=[2], data=b"\0" * 8)),
                lambda r: setattr(r.close, "session", 1), lambda r: setattr(r.crash, "session", 1)],
        "clear": [lambda r: setattr(r.fault_clear, "id", 1)],
    }
    for name, fills in seqs.items():
        for first in (1, 5):  # appliance or cloud tenant
            with open(os.path.join(out, f"{name}-{first}.bin"), "wb") as f:
                f.write(bytes([first]) + b"".join(frame(i + 2, fill) for i, fill in enumerate(fills)))


if __name__ == "__main__":
    if sys.argv[1] == "--daemon":
        daemon_seeds(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1])
