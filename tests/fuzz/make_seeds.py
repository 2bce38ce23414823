#!/usr/bin/python3
"""Writes small valid ONNX models into a folder: the fuzzer's seed corpus."""
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


if __name__ == "__main__":
    main(sys.argv[1])
