"""Every zoo model through Python against PyTorch's outputs; zero copies in
and out; outputs into caller memory; async submits; two threads at once."""
import os
import sys
import threading
import time

import numpy as np
import pytest

import tessera
from conftest import load, quick, rel_l2, zoo, zoo_models  # noqa: F401


@pytest.mark.parametrize("name", zoo_models())
def test_zoo_model_matches_pytorch(rt, quick, name):
    inputs = load(name + ".inputs.npz")
    want = load(name + ".outputs.npz")
    m = rt.compile(zoo(name + ".onnx"), shapes={k: v.shape for k, v in inputs.items()}, **quick)
    assert [n for n, _, _ in m.inputs] == list(inputs)
    s = m.session(veus=2)
    outs = s.run(inputs)
    assert list(outs) == [n for n, _, _ in m.outputs]  # model order
    for k, v in outs.items():
        assert k in want, k
        assert v.shape == want[k].shape and v.dtype == want[k].dtype, k
        assert rel_l2(v, want[k]) <= 1e-4, (k, rel_l2(v, want[k]))


def test_inputs_are_read_where_they_lie_and_outputs_are_tesseras(rt, quick):
    m = rt.compile(zoo("mlp.onnx"), **quick)
    s = m.session(veus=1)
    x = load("mlp.inputs.npz")["input"]
    out = s.run({"input": x})["output"]
    b = s.last_breakdown
    assert b["copy_in_bytes"] == 0, b  # the kernels read x itself
    assert not out.flags.owndata and out.base is not None  # Tessera's buffer, kept by the array
    # A torch tensor through DLPack is read in place too.
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy())
    y = s.run({"input": t})["output"]
    assert s.last_breakdown["copy_in_bytes"] == 0
    np.testing.assert_array_equal(y, out)
    # And the output goes out through DLPack without a copy.
    assert torch.from_dlpack(out).data_ptr() == out.ctypes.data
    assert np.from_dlpack(out).ctypes.data == out.ctypes.data


def test_output_memory_is_reused_only_once_nothing_holds_it(rt, quick):
    s = rt.compile(zoo("mlp.onnx"), **quick).session(veus=1)
    x = load("mlp.inputs.npz")["input"]
    x2 = (x * 2).astype(np.float32)
    a = s.run({"input": x})["output"]
    want_a = a.copy()
    want_b = s.run({"input": x2})["output"].copy()
    # Results held are never written again, whatever runs after them.
    view = a[0]
    b = s.run({"input": x2})["output"]
    c = s.run({"input": x2})["output"]
    assert len({a.ctypes.data, b.ctypes.data, c.ctypes.data}) == 3
    np.testing.assert_array_equal(a, want_a)
    np.testing.assert_array_equal(b, want_b)
    # A view, a memoryview or a DLPack tensor of a result holds it too.
    del a
    d = s.run({"input": x2})["output"]
    assert d.ctypes.data != view.base.ctypes.data
    np.testing.assert_array_equal(view, want_a[0])
    mv = memoryview(b)
    del b, view
    e = s.run({"input": x})["output"]
    assert e.ctypes.data != np.asarray(mv).ctypes.data
    np.testing.assert_array_equal(np.asarray(mv), want_b)
    np.testing.assert_array_equal(e, want_a)
    # Let go of entirely, a result's memory serves a later run (no allocation).
    del c, d, mv
    kept = e.ctypes.data
    del e
    f = s.run({"input": x})["output"]
    g = s.run({"input": x2})["output"]
    assert kept in (f.ctypes.data, g.ctypes.data)
    np.testing.assert_array_equal(f, want_a)
    np.testing.assert_array_equal(g, want_b)


def test_the_common_call_takes_the_lean_path_and_agrees_with_the_general_one(rt, quick):
    # s.run(feeds) with arrays of the model's dtype, layout and shape skips
    # pybind11's dispatcher; everything else goes through Session._run.
    s = rt.compile(zoo("mlp.onnx"), **quick).session(veus=1)
    x = load("mlp.inputs.npz")["input"]
    x2 = (x * 2).astype(np.float32)
    want = s._run({"input": x})["output"].copy()
    want2 = s._run({"input": x2})["output"].copy()
    assert s._fast_calls == 0
    feeds, feeds2 = {"input": x}, {"input": x2}
    refs = sys.getrefcount(x), sys.getrefcount(feeds)
    for _ in range(3):  # the address changes on every call
        np.testing.assert_array_equal(s.run(feeds)["output"], want)
        np.testing.assert_array_equal(s.run(feeds2)["output"], want2)
    assert s._fast_calls == 6
    assert (sys.getrefcount(x), sys.getrefcount(feeds)) == refs  # held for the run only
    assert s.last_breakdown["copy_in_bytes"] == 0
    # Not the common call: the general path, with the same results.
    torch = pytest.importorskip("torch")
    buf = np.empty_like(want)
    before = s._fast_calls
    np.testing.assert_array_equal(s.run(feeds=feeds)["output"], want)
    np.testing.assert_array_equal(s.run(feeds, copy=True)["output"], want)
    assert s.run(feeds, out={"output": buf})["output"] is buf
    np.testing.assert_array_equal(buf, want)
    np.testing.assert_array_equal(s.run({"input": torch.from_numpy(x)})["output"], want)
    np.testing.assert_array_equal(s.run({"input": np.asfortranarray(x)}, copy=True)["output"], want)
    assert s._fast_calls == before
    # A call made from inside a call (here by a key's __eq__, as a finalizer
    # could) takes the general path and leaves the outer call's inputs alone.
    inner = []

    class Key(str):
        __hash__ = str.__hash__

        def __eq__(self, other):
            inner.append(s.run(feeds2)["output"].copy())
            return str.__eq__(self, other)

    np.testing.assert_array_equal(s.run({Key("input"): x})["output"], want)
    assert len(inner) == 1
    np.testing.assert_array_equal(inner[0], want2)
    # Two threads on one session at once: one call at a time is lean, the
    # other takes the general path; every result is right.
    errors = []

    def work(f, w):
        for _ in range(20):
            got = s.run(f)["output"]
            if not np.array_equal(got, w):
                errors.append(float(np.abs(got - w).max()))

    threads = [threading.Thread(target=work, args=a) for a in ((feeds, want), (feeds2, want2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_outputs_into_caller_memory(rt, quick):
    s = rt.compile(zoo("mlp.onnx"), **quick).session(veus=1)
    x = load("mlp.inputs.npz")["input"]
    want = s.run({"input": x})["output"]
    buf = np.full(want.shape, np.nan, np.float32)
    got = s.run({"input": x}, out={"output": buf})["output"]
    assert got is buf
    np.testing.assert_array_equal(buf, want)
    assert s.last_breakdown["copy_out_bytes"] == 0
    # Unbound after the run: the next output is Tessera's again.
    again = s.run({"input": x})["output"]
    assert again.ctypes.data != buf.ctypes.data


def test_copy_converts_only_when_asked(rt, quick):
    s = rt.compile(zoo("mlp.onnx"), **quick).session(veus=1)
    x = load("mlp.inputs.npz")["input"]
    want = s.run({"input": x})["output"]
    with pytest.raises(tessera.InvalidArgument, match="input 'input' is float64.*copy=True"):
        s.run({"input": x.astype(np.float64)})
    with pytest.raises(tessera.InvalidArgument, match="not C-contiguous"):
        s.run({"input": np.asfortranarray(x)})
    np.testing.assert_array_equal(s.run({"input": np.asfortranarray(x)}, copy=True)["output"], want)
    np.testing.assert_allclose(s.run({"input": x.astype(np.float64)}, copy=True)["output"], want)


def test_submits_run_in_order_with_the_gil_released(rt, quick):
    s = rt.compile(zoo("resnet18.onnx"), **quick).session(veus=2)
    x = load("resnet18.inputs.npz")
    want = s.run(x)
    futs = [s.submit(x) for _ in range(4)]
    ticks = 0
    while not futs[-1].done():  # this thread runs while they do
        ticks += 1
        time.sleep(0.001)
    assert ticks > 0
    for f in futs:
        got = f.result()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


def test_two_threads_on_disjoint_cores_overlap(rt, quick):
    m = rt.compile(zoo("resnet18.onnx"), **quick)
    a, b = m.session(veus=1), m.session(veus=1)
    if rt.devices()[0]["veus"] >= 2:
        assert set(a.cores).isdisjoint(b.cores)
    x = load("resnet18.inputs.npz")
    spans = {0: [], 1: []}

    def work(i, s):
        for _ in range(4):
            t0 = time.perf_counter()
            s.run(x)
            spans[i].append((t0, time.perf_counter()))

    threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    overlap = any(s0 < e1 and s1 < e0 for s0, e0 in spans[0] for s1, e1 in spans[1])
    assert overlap, spans


def test_version_devices_and_breakdown(rt, quick):
    assert tessera.__version__.count(".") == 2
    names = [d["name"] for d in tessera.devices()]
    assert "cpu" in names and "null" in names
    s = rt.compile(zoo("mlp.onnx"), **quick).session(veus=1)
    s.run(load("mlp.inputs.npz"))
    b = s.last_breakdown
    assert b["compute_ms"] > 0 and set(b) >= {"copy_in_ms", "queue_ms", "compute_ms", "copy_out_ms", "device_ms"}
    assert b["device_ms"] == 0  # no accelerator: the CPU keeps no device time
    assert b["alone"] is False  # one vEU: nothing to run alone
    assert b["exchanged"] is False  # nor lists to exchange
    assert b["taken"] == 0  # nor another vEU to take rTasks from


def test_adapt_off_keeps_every_run_on_the_plan(rt, quick):
    m = rt.compile(zoo("mlp.onnx"), **quick)
    # Chosen by prediction (quick): runs start on the Plan's vEUs.
    plan = m.plan(veus=2)
    assert plan["alone_first"] is False and plan["alone_predicted_us"] == 0, plan["alone_first"]
    feeds = load("mlp.inputs.npz")
    want = m.session(veus=1).run(feeds)["output"]
    s = m.session(veus=2, adapt=False)
    for _ in range(20):
        got = s.run(feeds)["output"]
        assert s.last_breakdown["alone"] is False and s.last_breakdown["exchanged"] is False
        assert s.last_breakdown["taken"] == 0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_adapted_runs_say_how_they_went_and_give_the_same_bits(rt, quick):
    # A run goes as placed, alone or (2 vEUs) exchanged, never two at once,
    # and a run alone takes no rTasks between vEUs; every way gives the
    # Plan's bits (tests/plan/run_mode_test.cc runs each way on purpose).
    s = rt.compile(zoo("mlp.onnx"), **quick).session(veus=2)
    feeds = load("mlp.inputs.npz")
    want = s.run(feeds)["output"]
    for _ in range(40):
        np.testing.assert_array_equal(s.run(feeds)["output"], want)
        b = s.last_breakdown
        assert isinstance(b["alone"], bool) and isinstance(b["exchanged"], bool)
        assert not (b["alone"] and b["exchanged"]), b
        assert isinstance(b["taken"], int) and b["taken"] >= 0 and not (b["alone"] and b["taken"]), b


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: pinning to it changes nothing")
def test_the_thread_that_opens_a_session_gets_its_affinity_back(rt, quick):
    # Threads and processes started after the session is gone (a DataLoader's
    # workers, PyTorch's pool) must not be confined to one core.
    def body(seen):
        before = os.sched_getaffinity(0)
        m = rt.compile(zoo("mlp.onnx"), **quick)
        s = m.session(veus=2)
        s.run(load("mlp.inputs.npz"))
        seen["during"] = os.sched_getaffinity(0)
        del s
        seen["before"], seen["after"] = before, os.sched_getaffinity(0)

    seen = {}
    th = threading.Thread(target=body, args=(seen,))  # a thread of its own: the test's mask is left alone
    th.start()
    th.join()
    assert len(seen["during"]) == 1, seen
    assert seen["after"] == seen["before"], seen


@pytest.mark.parametrize("executor", ["sequential", "two-layer"])
def test_every_executor_writes_outputs_into_python_memory_alone(rt, quick, executor):
    # Python takes outputs in memory of its own each run; on the sequential
    # executors values made before the output share its arena bytes, and
    # must stay there (they were once written past the output's buffer).
    inputs = load("resnet18.inputs.npz")
    want = load("resnet18.outputs.npz")
    s = rt.compile(zoo("resnet18.onnx"), **quick).session(veus=2, executor=executor)
    for _ in range(3):
        outs = s.run(inputs)
        for k, v in outs.items():
            assert rel_l2(v, want[k]) <= 1e-4, (executor, k, rel_l2(v, want[k]))


def test_compile_options_reach_the_compiler(rt, quick):
    """The recurrent lowering, its chunks and block fusion, as the CLI's
    --no-lower-recurrent, --recurrent-chunk and --block-fusion."""
    def ops(m):
        return [step[0] for step in m.plan(veus=2)["steps"]]

    lstm = zoo("lstm_tc.onnx")
    lowered = ops(rt.compile(lstm, **quick))
    assert lowered.count("TesseraLstmCell") == 1000 and lowered.count("TesseraRnnProj") == 10
    assert "LSTM" not in lowered
    whole = ops(rt.compile(lstm, lower_recurrent=False, **quick))
    assert whole.count("LSTM") == 10 and "TesseraLstmCell" not in whole
    # 100 steps in chunks of 16: 7 projections per stacked layer, 1 for the first.
    chunked = ops(rt.compile(lstm, recurrent_chunk=16, **quick))
    assert chunked.count("TesseraRnnProj") == 1 + 9 * 7
    with pytest.raises(ValueError, match="recurrent_chunk -1"):
        rt.compile(lstm, recurrent_chunk=-1, **quick)
    mobilenet = zoo("mobilenet_v2.onnx")
    default = ops(rt.compile(mobilenet, **quick))
    assert "TesseraInvertedResidual" not in default
    assert "TesseraInvertedResidual" in ops(rt.compile(mobilenet, block_fusion=True, **quick))
    # Channel blocks (--no-channel-blocks), where the cpu kernels have them.
    cpu = [d for d in rt.devices() if d["kind"] == "cpu"][0]
    if cpu["kernels"] in ("avx2", "avx512"):
        assert default.count("TesseraBlockedConv") == 51
    unblocked = ops(rt.compile(mobilenet, channel_blocks=False, **quick))
    assert "TesseraBlockedConv" not in unblocked and "TesseraToBlocked" not in unblocked
