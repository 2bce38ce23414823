"""Tessera from Python: compile ONNX models (or Executables) and run them.

    import numpy as np, tessera
    rt = tessera.connect()                                   # "local": this process
    m = rt.compile("resnet18.onnx", shapes={"input.1": (1, 3, 224, 224)})
    s = m.session(veus=2)
    outs = s.run({"input.1": x})                             # {name: np.ndarray}, model order
    fut = s.submit({"input.1": x}); y = fut.result()         # asynchronous; the GIL is released

NumPy arrays of the model's dtype in C order, and objects with __dlpack__
(torch tensors on the CPU), are read where they lie; other inputs are an
error naming the input unless ``copy=True``. Outputs are NumPy arrays that
own Tessera's buffers (``np.from_dlpack``/``torch.from_dlpack`` take them
without a copy). Errors are ``tessera.Error`` subclasses, one per status
code. ``InferenceSession`` has ONNX Runtime's shape; ``compile_module``
turns a PyTorch module into a callable. docs/python.md is the reference.
"""

import os
import tempfile
from inspect import signature as _signature

import numpy as np

from ._tessera import (  # noqa: F401  (the public names)
    DataLoss,
    Error,
    FailedPrecondition,
    Future,
    Internal,
    InvalidArgument,
    Model,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Runtime,
    Session,
    Unavailable,
    Unimplemented,
    __version__,
    connect,
    host_map,
    inspect,
    set_log_level,
    token_hash,
)
from . import _tessera

__all__ = [
    "connect", "token_hash", "devices", "inspect", "host_map", "set_log_level", "Runtime", "Model", "Session", "Future", "InferenceSession",
    "compile_module", "Error", "InvalidArgument", "NotFound", "Unimplemented", "OutOfRange", "DataLoss",
    "FailedPrecondition", "ResourceExhausted", "Internal", "Unavailable", "PermissionDenied", "__version__",
]


def devices():
    """The devices of the local runtime, as dicts (name, kind, veus, free_veus, memory_bytes, place, note)."""
    return connect().devices()


def _as_array(name, value):
    """An input as a NumPy array over the same memory: arrays as they are,
    DLPack objects (torch tensors) through np.from_dlpack."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError) as e:
            raise InvalidArgument(f"input '{name}': its DLPack memory is not host memory NumPy can read ({e})") from None
    if np.isscalar(value) or isinstance(value, (list, tuple)):
        return np.asarray(value)
    raise InvalidArgument(f"input '{name}' is a {type(value).__name__}; expected a NumPy array or a DLPack tensor")


def _feeds(feeds):
    if not isinstance(feeds, dict):
        raise InvalidArgument(f"inputs must be a dict of name -> array, got {type(feeds).__name__}")
    return {name: _as_array(name, v) for name, v in feeds.items()}


# --------------------------------------------------- ONNX Runtime's shape ---

_ORT_TYPES = {"float32": "tensor(float)", "float64": "tensor(double)", "int64": "tensor(int64)",
              "int32": "tensor(int32)", "int8": "tensor(int8)", "uint8": "tensor(uint8)", "bool": "tensor(bool)"}


class NodeArg:
    """An input or output as ONNX Runtime describes it: name, shape (ints, or None
    where a dimension is dynamic), type ("tensor(float)")."""

    def __init__(self, name, dtype, shape):
        self.name = name
        self.shape = list(shape)
        self.type = _ORT_TYPES.get(dtype, f"tensor({dtype})")

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class InferenceSession:
    """ONNX Runtime's InferenceSession over Tessera, so that ORT code runs by
    changing the import. A model with dynamic dimensions is compiled for the
    shapes of the first run that needs them (and again for new shapes)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, veus=0, **kwargs):
        if isinstance(path_or_bytes, (bytes, bytearray)):
            fd, path = tempfile.mkstemp(suffix=".onnx")
            with os.fdopen(fd, "wb") as f:
                f.write(path_or_bytes)
            self._tmp = path
        else:
            path, self._tmp = os.fspath(path_or_bytes), None
        self._rt = connect()
        self._path = path
        self._veus = veus
        summary = inspect(path)  # inputs and outputs without compiling (dims may be dynamic)
        self._inputs, self._outputs = summary["inputs"], summary["outputs"]
        self._dynamic = any(None in shape for _, _, shape in self._inputs)
        self._model = None if self._dynamic else self._rt.compile(path)
        self._sessions = {}

    def __del__(self):
        if getattr(self, "_tmp", None):
            try:
                os.unlink(self._tmp)
            except OSError:
                pass

    def get_inputs(self):
        return [NodeArg(n, d, s) for n, d, s in self._inputs]

    def get_outputs(self):
        return [NodeArg(n, d, s) for n, d, s in self._outputs]

    def get_providers(self):
        return ["TesseraExecutionProvider"]

    def _session_for(self, feeds):
        dynamic = {n: tuple(np.shape(feeds[n])) for n, _, s in self._inputs if None in s and n in feeds}
        key = tuple(sorted(dynamic.items()))
        s = self._sessions.get(key)
        if s is None:
            model = self._rt.compile(self._path, shapes=dict(dynamic)) if dynamic else self._model
            s = model.session(veus=self._veus)
            self._sessions[key] = s
        return s

    def run(self, output_names, input_feed, run_options=None):
        feeds = _feeds(input_feed)
        outs = self._session_for(feeds).run(feeds)
        names = list(outs) if output_names is None else list(output_names)
        missing = [n for n in names if n not in outs]
        if missing:
            raise NotFound(f"no output named {missing[0]!r} (outputs: {', '.join(outs)})")
        return [outs[n] for n in names]


# --------------------------------------------------------- PyTorch modules ---

def compile_module(module, example_inputs, veus=0, device="cpu", **compile_options):
    """Exports `module` with torch.onnx.export (opset 17) to a temporary file,
    compiles it, and returns a callable that takes and returns torch tensors.
    `example_inputs` is a tensor or a tuple of them, with the shapes the
    callable will be given."""
    import torch  # only here: the rest of the package does not need it

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    names = [f"input{i}" for i in range(len(example_inputs))]
    # The model is read again by each session made from it: the file lives
    # as long as the callable.
    tmp = tempfile.TemporaryDirectory(prefix="tessera-module-")
    path = os.path.join(tmp.name, "module.onnx")
    module = module.eval()
    export = torch.onnx.export
    extra = {"dynamo": False} if "dynamo" in _signature(export).parameters else {}
    with torch.no_grad():
        export(module, example_inputs, path, opset_version=17, input_names=names, **extra)
    model = connect().compile(path, **compile_options)
    session = model.session(device=device, veus=veus)
    out_names = [n for n, _, _ in model.outputs]

    def call(*args):
        if len(args) != len(names):
            raise InvalidArgument(f"the module was compiled for {len(names)} inputs, got {len(args)}")
        feeds = {n: a.detach().contiguous() if isinstance(a, torch.Tensor) else a for n, a in zip(names, args)}
        outs = session.run(feeds)
        tensors = tuple(torch.from_numpy(outs[n]) for n in out_names)
        return tensors[0] if len(tensors) == 1 else tensors

    call.session = session
    call.model = model
    call._tmp = tmp
    return call
