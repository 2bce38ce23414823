"""Bad input raises the tessera.Error subclass for its status code, with a
message that names the file, input or option at fault."""
import numpy as np
import pytest

import tessera
from conftest import load, zoo


@pytest.fixture(scope="module")
def mlp(rt, quick):
    return rt.compile(zoo("mlp.onnx"), **quick).session(veus=1)


def test_every_error_is_a_tessera_error():
    for cls in (tessera.InvalidArgument, tessera.NotFound, tessera.Unimplemented, tessera.OutOfRange,
                tessera.DataLoss, tessera.FailedPrecondition, tessera.ResourceExhausted, tessera.Internal):
        assert issubclass(cls, tessera.Error)


def test_files(rt, tmp_path):
    with pytest.raises(tessera.NotFound, match="nothing.onnx"):
        rt.compile(str(tmp_path / "nothing.onnx"))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(tessera.Error, match="bad.onnx"):
        rt.compile(str(bad))
    cut = tmp_path / "cut.tsx"
    m = rt.compile(zoo("mlp.onnx"), profile=False, measure=False)
    m.save(str(cut), veus=1, policy="critical-path")
    assert tessera.inspect(str(cut))["plan"]["policy"] == "critical-path"
    cut.write_bytes(cut.read_bytes()[:3000])
    with pytest.raises(tessera.Error, match="cut.tsx"):
        rt.compile(str(cut))


def test_inputs_are_named(mlp):
    x = load("mlp.inputs.npz")["input"]
    with pytest.raises(tessera.NotFound, match="'nope' is not an input.*inputs: input"):
        mlp.run({"input": x, "nope": x})
    with pytest.raises(tessera.NotFound, match="'nope' is not an input.*inputs: input"):
        mlp.run({"nope": x})  # as many entries as inputs, but not theirs
    with pytest.raises(tessera.InvalidArgument, match="input 'input' is >f4"):
        mlp.run({"input": x.astype(">f4")})  # float32, but not in this machine's byte order
    with pytest.raises(tessera.InvalidArgument, match="input 'input' has shape"):
        mlp.run({"input": x[:2]})
    with pytest.raises(tessera.InvalidArgument, match="input 'input'.*not given"):
        mlp.run({})
    with pytest.raises(tessera.InvalidArgument, match="input 'input' is int32"):
        mlp.run({"input": x.astype(np.int32)})
    with pytest.raises(tessera.InvalidArgument, match="dict"):
        mlp.run([x])
    with pytest.raises(tessera.InvalidArgument, match="output 'output' is float32 16x10"):
        mlp.run({"input": x}, out={"output": np.zeros((1, 1), np.float32)})
    with pytest.raises(tessera.NotFound, match="'logits' is not an output"):
        mlp.run({"input": x}, out={"logits": np.zeros((16, 10), np.float32)})


def test_options_and_uris(rt):
    m = rt.compile(zoo("mlp.onnx"), profile=False, measure=False)
    with pytest.raises(tessera.InvalidArgument, match="executor"):
        m.session(executor="fast")
    with pytest.raises(tessera.InvalidArgument, match="policy"):
        m.session(policy="greedy")
    with pytest.raises(tessera.NotFound, match="no device 'tpu'"):
        m.session(device="tpu")
    with pytest.raises(tessera.Unavailable, match="no daemon at /nonexistent/tessera.sock"):
        tessera.connect("unix:///nonexistent/tessera.sock")
    with pytest.raises(tessera.Unimplemented, match="remote daemons"):
        tessera.connect("tcp://10.0.0.1:7000")
    with pytest.raises(tessera.InvalidArgument):
        tessera.connect("http://x")
    with pytest.raises(tessera.InvalidArgument):
        tessera.set_log_level("loud")
    with pytest.raises(tessera.InvalidArgument, match="input_ids"):
        rt.compile(zoo("bert_tiny.onnx"), shapes={"input_ids": (1, 0, 3)})


def test_objects_come_only_from_the_calls_that_make_them():
    # Cls() or Cls.__new__(Cls) would leave an object with nothing behind it.
    for name, maker in (("Runtime", "connect"), ("Model", "compile"), ("Session", "session"), ("Future", "submit")):
        cls = getattr(tessera._tessera, name)
        with pytest.raises(TypeError, match=maker):
            cls()
        with pytest.raises(TypeError):
            cls.__new__(cls)
