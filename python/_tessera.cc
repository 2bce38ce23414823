// tessera._tessera: the public C++ API (include/tessera/) for Python, and
// nothing it lacks. NumPy arrays go in without a copy where their dtype and
// layout are the model's (borrowed for the run, which holds a reference);
// outputs come back as NumPy arrays that own Tessera's buffers. The GIL is
// released for the whole of run and submit. The package around it
// (python/tessera/__init__.py) adds DLPack inputs, the ONNX Runtime shape
// and compile_module.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace py = pybind11;

namespace {

using namespace tessera;

// A failed Status on its way to Python: raised as the tessera.Error
// subclass for its code.
struct StatusError {
  Status status;
};

[[noreturn]] void raise(const Status& st) { throw StatusError{st}; }

// Sets the Python error for a failed Status (the tessera.Error subclass
// for its code); made where the exception types are.
void (*set_status_error)(const Status&) = nullptr;

template <typename T>
T value_or_raise(Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(*r);
}

void ok_or_raise(const Status& st) {
  if (!st.ok()) raise(st);
}

// f() with the GIL released (the C++ API's calls that may block or run).
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// NumPy's dtype for a Tessera dtype, and back.
py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kBool: return py::dtype("bool");
    default: return py::dtype("void");
  }
}

bool same_dtype(const py::array& a, DType t) {
  if (t == DType::kBool) return a.dtype().kind() == 'b' && a.itemsize() == 1;
  return a.dtype().is(numpy_dtype(t)) || a.dtype().equal(numpy_dtype(t));
}

std::string dtype_text(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

py::tuple shape_tuple(const std::vector<int64_t>& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) t[i] = py::none();
    else t[i] = shape[i];
  }
  return t;
}

py::list infos(const std::vector<TensorInfo>& v) {
  py::list out;
  for (const TensorInfo& i : v) out.append(py::make_tuple(i.name, std::string(dtype_name(i.dtype)), shape_tuple(i.shape)));
  return out;
}

// An output as a NumPy array that owns the Tensor's bytes (no copy).
py::array to_numpy(const Tensor& t) {
  auto keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  return py::array(numpy_dtype(t.dtype()), shape, keep->raw(), owner);
}

// An input as a NumPy array over the same memory: arrays as they are,
// anything else (DLPack tensors, lists) through the package's
// tessera._as_array, which names the input when it cannot.
py::array as_array(const std::string& name, py::handle value) {
  if (py::isinstance<py::array>(value)) return py::reinterpret_borrow<py::array>(value);
  return py::module_::import("tessera").attr("_as_array")(name, value).cast<py::array>();
}

// The feeds of one run: every array bound where it lies (the arrays kept
// alive with the request), converted only with copy=True.
struct Feeds {
  NamedTensors tensors;
  std::vector<py::array> keep;
};

Feeds feeds_of(const std::vector<TensorInfo>& inputs, py::handle given, bool copy) {
  if (!py::isinstance<py::dict>(given))
    raise(invalid_argument("inputs must be a dict of name -> array, got " +
                           py::str(py::type::handle_of(given).attr("__name__")).cast<std::string>()));
  Feeds f;
  for (auto item : py::reinterpret_borrow<py::dict>(given)) {
    const std::string name = py::str(item.first);
    const TensorInfo* info = nullptr;
    for (const TensorInfo& i : inputs)
      if (i.name == name) info = &i;
    if (info == nullptr) {
      std::string names;
      for (const TensorInfo& i : inputs) names += (names.empty() ? "" : ", ") + i.name;
      raise(not_found("'" + name + "' is not an input of the model (inputs: " + names + ")"));
    }
    py::array a = as_array(name, item.second);
    const bool contiguous = (a.flags() & py::array::c_style) != 0;
    if (!same_dtype(a, info->dtype) || !contiguous) {
      if (!copy)
        raise(invalid_argument("input '" + name + "' is " + dtype_text(a) + (contiguous ? "" : ", not C-contiguous,") +
                               "; the model takes " + std::string(dtype_name(info->dtype)) +
                               " in C order (pass copy=True to convert it)"));
      a = py::module_::import("numpy").attr("ascontiguousarray")(a, numpy_dtype(info->dtype)).cast<py::array>();
    }
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    f.tensors.set(name, Tensor::wrap(info->dtype, shape, const_cast<void*>(a.data())));
    f.keep.push_back(a);
  }
  return f;
}

py::dict outputs_of(const NamedTensors& out) {
  py::dict d;
  for (const auto& [name, t] : out) d[py::str(name)] = to_numpy(t);
  return d;
}

// A Session as Python holds it: the C++ Session and, per output, the
// arrays of earlier results that the session may write again. One whose
// only reference is the pool's (the caller has let go of it, and of every
// view, DLPack tensor or memoryview of it) is reused as it stands: no
// memory to allocate, no array to make or free on the call's path.
struct PySession : Session {
  explicit PySession(Session s) : Session(std::move(s)), pool(outputs().size()) { prepare_fast(); }
  struct Kept {
    py::object array;
    Tensor tensor;
  };
  static constexpr size_t kKept = 2;  // results alive at once in `y = s.run(x)`
  std::vector<std::vector<Kept>> pool;

  // What run_fast compares a call against, made once: per input its name
  // (a Python str) and NumPy dtype (its shape is inputs()'s); and the
  // Tensors of the last fast call (inputs in model order, then outputs),
  // rewrapped only when an address changes. `fast` is false where some
  // input's shape is dynamic; `fast_busy` while a fast call runs (a second
  // thread's call on the same session then takes the general path, which
  // keeps its own).
  bool fast = false;
  bool fast_busy = false;
  uint64_t fast_calls = 0;  // Session._fast_calls, for the tests
  std::vector<py::object> in_names, in_dtypes, out_names;
  NamedTensors fast_in, fast_out;

  void prepare_fast() {
    fast = true;
    for (const TensorInfo& i : inputs()) {
      for (int64_t d : i.shape) fast = fast && d >= 0;
      in_names.push_back(py::str(i.name));
      in_dtypes.push_back(numpy_dtype(i.dtype));
      fast_in.set(i.name, Tensor::wrap(i.dtype, i.shape, nullptr));
    }
    for (const TensorInfo& o : outputs()) {
      out_names.push_back(py::str(o.name));
      fast_out.set(o.name, Tensor());
    }
  }

  // Output i's array for the next run (a kept one that nothing else
  // holds, else a fresh one, kept), and its Tensor; valid until the next
  // call for output i.
  const Kept& output_array(size_t i) {
    std::vector<Kept>& kept = pool[i];
    for (Kept& k : kept)
      if (k.array.ref_count() == 1) return k;
    const TensorInfo& o = outputs()[i];
    Tensor t(o.dtype, o.shape);
    py::object a = to_numpy(t);
    if (kept.size() == kKept) kept.erase(kept.begin());
    kept.push_back({a, t});
    return kept.back();
  }
};

// Session.run: everything Python needs is made before the GIL is let go
// (the result dict, the outputs' arrays over Tessera's memory), so that
// after the run, when a long run has left the caches cold, only the GIL
// is taken back. The Plan writes the outputs into those arrays itself.
py::dict run_session(PySession& s, py::handle feeds, py::handle out, bool copy) {
  Feeds f = feeds_of(s.inputs(), feeds, copy);
  NamedTensors into;
  py::dict result;
  py::dict given;
  if (!out.is_none()) {
    if (!py::isinstance<py::dict>(out)) raise(invalid_argument("out must be a dict of name -> array"));
    given = py::reinterpret_borrow<py::dict>(out);
  }
  const std::vector<TensorInfo>& outputs = s.outputs();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorInfo& o = outputs[i];
    py::str key(o.name);
    if (given.contains(key)) {
      py::object v = given[key];
      if (!py::isinstance<py::array>(v)) raise(invalid_argument("out['" + o.name + "'] must be a NumPy array"));
      py::array a = py::reinterpret_borrow<py::array>(v);
      if (!same_dtype(a, o.dtype) || !(a.flags() & py::array::c_style) || !a.writeable())
        raise(invalid_argument("out['" + o.name + "'] must be a writable C-contiguous " + std::string(dtype_name(o.dtype)) +
                               " array, got " + dtype_text(a)));
      std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
      into.set(o.name, Tensor::wrap(o.dtype, shape, a.mutable_data()));
      result[key] = a;
    } else {
      const PySession::Kept& k = s.output_array(i);
      result[key] = k.array;
      into.set(o.name, k.tensor);
    }
  }
  for (auto item : given) {
    const std::string name = py::str(item.first);
    if (!into.contains(name)) raise(not_found("'" + name + "' is not an output of the model"));
  }
  ok_or_raise(without_gil([&] { return s.run(f.tensors, into); }));
  return result;
}

// Session.run as CPython calls it (METH_FASTCALL), without pybind11's
// dispatcher: after a long run the caches are cold, and each cache line
// the call touches costs a trip to memory. The common call, s.run(feeds)
// with every input a C-contiguous array of the model's dtype and shape,
// touches only what it needs and allocates nothing unless an address
// changed; any other call (out=, copy=, DLPack tensors, anything wrong)
// goes to run_session, which converts or names what is wrong.
PyObject* run_general = nullptr;  // Session._run: run_session through pybind11 (never freed)

PyObject* call_general(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t n = nargs + (kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0);
  std::vector<PyObject*> with_self(static_cast<size_t>(n) + 1);
  with_self[0] = self;
  std::copy(args, args + n, with_self.begin() + 1);
  return PyObject_Vectorcall(run_general, with_self.data(), static_cast<size_t>(nargs) + 1, kwnames);
}

// The array bound to input i of a fast call, or nullptr where the call
// must take the general path.
PyObject* fast_input(const PySession& s, size_t i, PyObject* feeds) {
  PyObject* v = PyDict_GetItemWithError(feeds, s.in_names[i].ptr());
  if (v == nullptr || !py::detail::npy_api::get().PyArray_Check_(v)) return nullptr;
  auto* a = py::detail::array_proxy(v);
  if (a->descr != s.in_dtypes[i].ptr() || !(a->flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_)) return nullptr;
  const std::vector<int64_t>& shape = s.inputs()[i].shape;
  if (a->nd != static_cast<int>(shape.size())) return nullptr;
  for (size_t d = 0; d < shape.size(); ++d)
    if (a->dimensions[d] != shape[d]) return nullptr;
  return v;
}

// A fast call's hold on its session and inputs: the session marked busy
// (a call made meanwhile, by another thread or by a finalizer run from
// this one, takes the general path and leaves the session's Tensors
// alone), and each input's array referenced as soon as it is found, until
// the call returns however it returns.
struct FastCall {
  static constexpr size_t kMaxInputs = 8;  // more: the general path
  PySession& s;
  PyObject* held[kMaxInputs];
  size_t n = 0;
  explicit FastCall(PySession& session) : s(session) { s.fast_busy = true; }
  ~FastCall() {
    s.fast_busy = false;
    for (size_t i = 0; i < n; ++i) Py_DECREF(held[i]);
  }
  void hold(PyObject* a) {
    Py_INCREF(a);
    held[n++] = a;
  }
};

// The common call on `feeds`; nullptr with `declined` set where the call
// is not one (run_fast then takes the general path), else with a Python
// error set where it failed.
PyObject* run_lean(PySession& s, PyObject* feeds, bool& declined) {
  FastCall call(s);
  for (size_t i = 0; i < s.in_names.size(); ++i) {
    PyObject* a = fast_input(s, i, feeds);
    if (a == nullptr) {
      declined = !PyErr_Occurred();
      return nullptr;
    }
    call.hold(a);
  }
  try {
    auto in = s.fast_in.begin();
    for (size_t i = 0; i < call.n; ++i, ++in) {
      void* at = py::detail::array_proxy(call.held[i])->data;
      if (in->second.raw() != at) in->second = Tensor::wrap(in->second.dtype(), in->second.shape(), at);
    }
    py::dict result;
    auto out = s.fast_out.begin();
    for (size_t i = 0; i < s.out_names.size(); ++i, ++out) {
      const PySession::Kept& k = s.output_array(i);
      if (out->second.raw() != k.tensor.raw()) out->second = k.tensor;
      if (PyDict_SetItem(result.ptr(), s.out_names[i].ptr(), k.array.ptr()) != 0) return nullptr;
    }
    ++s.fast_calls;
    Status st = without_gil([&] { return s.run(s.fast_in, s.fast_out); });
    if (!st.ok()) {
      set_status_error(st);
      return nullptr;
    }
    return result.release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyObject* run_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // The method's descriptor has checked that self is a Session.
  py::detail::value_and_holder vh = reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder();
  if (!vh.holder_constructed() || vh.value_ptr() == nullptr) {
    PyErr_SetString(PyExc_TypeError, "Session.run: this Session was never made (sessions come from Model.session())");
    return nullptr;
  }
  PySession& s = *vh.value_ptr<PySession>();
  const size_t n_in = s.in_names.size();
  bool declined = nargs != 1 || kwnames != nullptr || !s.fast || s.fast_busy || n_in > FastCall::kMaxInputs ||
                  !PyDict_CheckExact(args[0]) || PyDict_GET_SIZE(args[0]) != static_cast<Py_ssize_t>(n_in);
  if (!declined) {
    PyObject* result = run_lean(s, args[0], declined);
    if (!declined) return result;
  }
  return call_general(self, args, nargs, kwnames);
}

// submit()'s handle: the Event and what the request borrows.
struct Future {
  Event event;
  std::shared_ptr<Feeds> feeds;
  bool done() const { return event.poll(); }
  py::dict result() {
    Result<NamedTensors> out = without_gil([&] { return event.outputs(); });
    feeds.reset();
    return outputs_of(value_or_raise(std::move(out)));
  }
};

Executor executor_of(const std::string& s) {
  Executor e;
  if (!executor_parse(s, &e)) raise(invalid_argument("executor must be plan, two-layer or sequential, got '" + s + "'"));
  return e;
}

PlanPolicy policy_of(const std::string& s) {
  PlanPolicy p;
  if (!policy_parse(s, &p)) raise(invalid_argument("policy must be auto, wavefront or critical-path, got '" + s + "'"));
  return p;
}

py::dict device_dict(const DeviceInfo& d) {
  py::dict o;
  o["name"] = d.name;
  o["kind"] = d.kind;
  o["veus"] = d.veus;
  o["free_veus"] = d.free_veus;
  o["memory_bytes"] = d.memory_bytes;
  o["place"] = d.place;
  o["note"] = d.note;
  o["kernels"] = d.kernels;
  return o;
}

py::dict plan_dict(const PlanInfo& p) {
  py::dict d;
  d["source"] = p.source;
  d["policy"] = std::string(policy_name(p.policy));
  d["veus"] = p.veus;
  d["requested_veus"] = p.requested_veus;
  d["predicted_us"] = p.predicted_us;
  d["measured_us"] = p.measured_us;
  d["alone_first"] = p.alone_first;
  d["alone_predicted_us"] = p.alone_predicted_us;
  d["costs_profiled"] = p.costs_profiled;
  d["waits"] = p.waits;
  d["signals"] = p.signals;
  d["arena_bytes"] = p.arena_bytes;
  d["rtasks"] = p.tasks.size();
  d["tasks_per_veu"] = p.tasks_per_veu;
  py::list steps;
  for (const PlanStep& s : p.steps) steps.append(py::make_tuple(s.op, s.node, s.kernel, s.path, s.rtasks));
  d["steps"] = steps;
  py::list cands;
  for (const PlanCandidate& c : p.candidates)
    cands.append(py::make_tuple(c.veus, std::string(policy_name(c.policy)), c.predicted_us, c.measured_us));
  d["candidates"] = cands;
  return d;
}

py::dict summary_dict(const ModelSummary& s) {
  py::dict d;
  d["path"] = s.path;
  d["graph_name"] = s.graph_name;
  d["opset"] = s.opset;
  d["executable"] = s.executable;
  d["inputs"] = infos(s.inputs);
  d["outputs"] = infos(s.outputs);
  d["shapes_bound"] = s.shapes_bound.ok() ? py::object(py::none()) : py::object(py::str(s.shapes_bound.message()));
  d["nodes"] = s.nodes;
  py::list ops;
  for (const OpCount& o : s.ops) ops.append(py::make_tuple(o.op, o.count, o.supported));
  d["ops"] = ops;
  d["parameters"] = s.parameters;
  d["parameter_bytes"] = s.parameter_bytes;
  d["flops"] = s.flops;
  d["graph_text"] = s.graph_text;
  d["plan"] = s.plan ? py::object(plan_dict(*s.plan)) : py::object(py::none());
  return d;
}

// tp_new of the module's classes: their objects come only from the calls
// that make them, never from Cls() or Cls.__new__(Cls), which would leave
// an object with no C++ value behind it. (pybind11 makes the objects it
// returns without tp_new.)
PyObject* refuse_new(PyTypeObject* type, PyObject*, PyObject*) {
  const std::string name = type->tp_name;
  const char* from = name.ends_with("Runtime") ? "tessera.connect()"
                     : name.ends_with("Model") ? "Runtime.compile()"
                     : name.ends_with("Session") ? "Model.session()"
                                                 : "Session.submit()";
  PyErr_Format(PyExc_TypeError, "%s objects come from %s; they cannot be made directly", type->tp_name, from);
  return nullptr;
}

}  // namespace

PYBIND11_MODULE(_tessera, m) {
  m.doc() = "Tessera's public C++ API; import the package `tessera`, not this module.";
  m.attr("__version__") = std::string(version());
  // NumPy's C API table, loaded now rather than on the first run (where
  // loading it could run Python code in the middle of Session.run).
  py::detail::npy_api::get();

  // tessera.Error and one subclass per Status code.
  static py::exception<StatusError> error(m, "Error", PyExc_RuntimeError);
  static std::map<StatusCode, py::object> by_code;
  const std::pair<StatusCode, const char*> codes[] = {
      {StatusCode::kInvalidArgument, "InvalidArgument"}, {StatusCode::kNotFound, "NotFound"},
      {StatusCode::kUnimplemented, "Unimplemented"},     {StatusCode::kOutOfRange, "OutOfRange"},
      {StatusCode::kDataLoss, "DataLoss"},               {StatusCode::kFailedPrecondition, "FailedPrecondition"},
      {StatusCode::kResourceExhausted, "ResourceExhausted"}, {StatusCode::kInternal, "Internal"},
      {StatusCode::kUnavailable, "Unavailable"},         {StatusCode::kPermissionDenied, "PermissionDenied"},
  };
  for (const auto& [code, name] : codes) {
    const std::string qual = std::string("tessera.") + name;
    PyObject* cls = PyErr_NewException(qual.c_str(), error.ptr(), nullptr);
    by_code[code] = py::reinterpret_steal<py::object>(cls);
    m.attr(name) = by_code[code];
  }
  set_status_error = [](const Status& st) {
    auto it = by_code.find(st.code());
    PyErr_SetString(it != by_code.end() ? it->second.ptr() : error.ptr(), st.message().c_str());
  };
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      set_status_error(e.status);
    }
  });

  py::class_<Future>(m, "Future", "A submitted run: result() waits for its outputs (the GIL released).")
      .def("done", &Future::done)
      .def("result", &Future::result);

  py::class_<PySession>(m, "Session", "A model placed on a device's vEUs (tessera/runtime.h, Session).")
      .def_property_readonly("inputs", [](const PySession& s) { return infos(s.inputs()); })
      .def_property_readonly("outputs", [](const PySession& s) { return infos(s.outputs()); })
      .def_property_readonly("device", &Session::device)
      .def_property_readonly("veus", &Session::veus)
      .def_property_readonly("cores", &Session::cores)
      .def_property_readonly("executor", [](const PySession& s) { return std::string(executor_name(s.executor())); })
      .def_property_readonly("_fast_calls", [](const PySession& s) { return s.fast_calls; })
      .def("_run", &run_session, py::arg("feeds"), py::arg("out") = py::none(), py::arg("copy") = false,
           "Session.run through pybind11 (every call that is not Session.run's common case).")
      .def(
          "submit",
          [](PySession& s, py::handle feeds, bool copy) {
            auto f = std::make_shared<Feeds>(feeds_of(s.inputs(), feeds, copy));
            Future fut;
            fut.feeds = f;
            fut.event = without_gil([&] { return s.submit(f->tensors); });
            return fut;
          },
          py::arg("feeds"), py::arg("copy") = false,
          "Runs asynchronously; returns a Future (done(), result()). The inputs must stay alive and unchanged\n"
          "until it is done.")
      .def_property_readonly("last_breakdown",
                             [](const PySession& s) {
                               RunBreakdown b = s.last_breakdown();
                               py::dict d;
                               d["copy_in_ms"] = b.copy_in_ms;
                               d["queue_ms"] = b.queue_ms;
                               d["compute_ms"] = b.compute_ms;
                               d["copy_out_ms"] = b.copy_out_ms;
                               d["device_ms"] = b.device_ms;
                               d["wait_ms"] = b.wait_ms;
                               d["alone"] = b.alone;
                               d["exchanged"] = b.exchanged;
                               d["taken"] = b.taken;
                               d["copy_in_bytes"] = b.copy_in_bytes;
                               d["copy_out_bytes"] = b.copy_out_bytes;
                               return d;
                             })
      .def("trace_next_run", [](PySession& s, const std::string& path) { ok_or_raise(s.trace_next_run(path)); })
      .def("plan_json", [](const PySession& s) { return s.plan_json(); });
  {
    py::object cls = m.attr("Session");
    run_general = py::object(cls.attr("_run")).release().ptr();
    static PyMethodDef run_def = {
        "run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&run_fast)), METH_FASTCALL | METH_KEYWORDS,
        "run($self, /, feeds, out=None, copy=False)\n--\n\n"
        "Runs once on `feeds` ({input name: array or DLPack tensor}); returns {output name: array} in model\n"
        "order. `out` ({output name: array}) writes those outputs into the arrays given; copy=True converts\n"
        "inputs of another dtype or layout (else they are refused)."};
    PyObject* run = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &run_def);
    if (run == nullptr) throw py::error_already_set();
    cls.attr("run") = py::reinterpret_steal<py::object>(run);
  }

  py::class_<Model>(m, "Model", "A compiled model (tessera/runtime.h, Model).")
      .def_property_readonly("path", &Model::path)
      .def_property_readonly("inputs", [](const Model& x) { return infos(x.inputs()); })
      .def_property_readonly("outputs", [](const Model& x) { return infos(x.outputs()); })
      .def_property_readonly("is_executable", &Model::is_executable)
      .def(
          "session",
          [](Model& x, const std::string& device, int veus, const std::string& executor, const std::string& policy,
             std::vector<int> cores, bool pin, double latency_ms, bool adapt) {
            SessionOptions o;
            o.device = device;
            o.veus = veus;
            o.executor = executor_of(executor);
            o.policy = policy_of(policy);
            o.cores = std::move(cores);
            o.pin = pin;
            o.latency_ms = latency_ms;
            o.adapt = adapt;
            return PySession(value_or_raise(without_gil([&] { return x.session(o); })));
          },
          py::arg("device") = "cpu", py::arg("veus") = 0, py::arg("executor") = "plan", py::arg("policy") = "auto",
          py::arg("cores") = std::vector<int>{}, py::arg("pin") = true, py::arg("latency_ms") = 0.0,
          py::arg("adapt") = true)
      .def(
          "save",
          [](Model& x, const std::string& path, int veus, const std::string& policy) {
            SessionOptions o;
            o.veus = veus;
            o.policy = policy_of(policy);
            ok_or_raise(without_gil([&] { return x.save(path, o); }));
          },
          py::arg("path"), py::arg("veus") = 0, py::arg("policy") = "auto",
          "Writes an Executable (.tsx) with its Plan for `veus` vEUs (0: every core).")
      .def(
          "plan",
          [](Model& x, const std::string& device, int veus, const std::string& policy) {
            SessionOptions o;
            o.device = device;
            o.veus = veus;
            o.policy = policy_of(policy);
            Result<PlanInfo> p = without_gil([&] { return x.plan(o); });
            return plan_dict(value_or_raise(std::move(p)));
          },
          py::arg("device") = "cpu", py::arg("veus") = 0, py::arg("policy") = "auto",
          "The Plan a session with these options would run, as a dict.")
      .def(
          "profile",
          [](Model& x, bool refresh) {
            Result<ProfileReport> r = without_gil([&] { return x.profile(refresh); });
            ProfileReport p = value_or_raise(std::move(r));
            py::list rows;
            for (const ProfileRow& row : p.rows)
              rows.append(py::make_tuple(row.op, row.node, row.kernel, row.path, row.rtasks, row.us_per_rtask, row.cached));
            return rows;
          },
          py::arg("refresh") = false,
          "One rTask of every op measured: [(op, node, rKernel, path, rTasks, us per rTask, cached)].");

  py::class_<Runtime>(m, "Runtime", "Where models compile and sessions run (tessera/runtime.h, Runtime).")
      .def_property_readonly("uri", &Runtime::uri)
      .def(
          "ops",
          [](const Runtime& r, const std::string& device) {
            py::list l;
            for (const OpSupport& o : value_or_raise(r.ops(device))) {
              py::list ks;
              for (const KernelInfo& k : o.kernels) ks.append(py::make_tuple(k.name, k.description));
              l.append(py::make_tuple(o.op, ks));
            }
            return l;
          },
          py::arg("device") = "cpu")
      .def("status",
           [](const Runtime& r) {
             Result<ServerStatus> st = without_gil([&] { return r.status(); });
             return py::module_::import("json").attr("loads")(status_to_json(value_or_raise(std::move(st))));
           },
           "The daemon as this tenant sees it (a dict, as `tessera status --json` prints it).")
      .def("faults",
           [](const Runtime& r) {
             Result<std::vector<FaultInfo>> f = without_gil([&] { return r.faults(); });
             return py::module_::import("json").attr("loads")(faults_to_json(value_or_raise(std::move(f))));
           },
           "The daemon's fault records (this tenant's; an admin's: all), as a list of dicts.")
      .def("clear_fault", [](Runtime& r, uint64_t id) { ok_or_raise(without_gil([&] { return r.clear_fault(id); })); })
      .def("devices",
           [](const Runtime& r) {
             py::list l;
             for (const DeviceInfo& d : r.devices()) l.append(device_dict(d));
             return l;
           })
      .def(
          "compile",
          [](Runtime& r, const std::string& path, std::map<std::string, std::vector<int64_t>> shapes, bool profile,
             bool measure, bool fuse, bool variants, std::string host_map, bool block_fusion, bool concat_in_place, bool channel_blocks,
             bool lower_recurrent, int64_t recurrent_chunk, bool recurrent_carry) {
            if (recurrent_chunk < 0)
              throw py::value_error("recurrent_chunk " + std::to_string(recurrent_chunk) +
                                    ": a number of steps, 0 or more");
            CompileOptions o;
            o.shapes = std::move(shapes);
            o.profile = profile;
            o.measure = measure;
            o.fuse = fuse;
            o.variants = variants;
            o.host_map = std::move(host_map);
            o.block_fusion = block_fusion;
            o.concat_in_place = concat_in_place;
            o.channel_blocks = channel_blocks;
            o.lower_recurrent = lower_recurrent;
            o.recurrent_chunk = recurrent_chunk;
            o.recurrent_carry = recurrent_carry;
            return value_or_raise(without_gil([&] { return r.compile(path, o); }));
          },
          py::arg("path"), py::arg("shapes") = std::map<std::string, std::vector<int64_t>>{},
          py::arg("profile") = true, py::arg("measure") = true, py::arg("fuse") = true, py::arg("variants") = true,
          py::arg("host_map") = "", py::arg("block_fusion") = false, py::arg("concat_in_place") = true, py::arg("channel_blocks") = true,
          py::arg("lower_recurrent") = true, py::arg("recurrent_chunk") = 0, py::arg("recurrent_carry") = true);

  m.def(
      "inspect",
      [](const std::string& path, std::map<std::string, std::vector<int64_t>> shapes, bool graph_text) {
        InspectOptions o;
        o.shapes = std::move(shapes);
        o.graph_text = graph_text;
        return summary_dict(value_or_raise(inspect(path, o)));
      },
      py::arg("path"), py::arg("shapes") = std::map<std::string, std::vector<int64_t>>{}, py::arg("graph_text") = false,
      "What a model file holds, without compiling it (a dict).");
  m.def(
      "host_map",
      [](bool refresh) {
        HostMapOptions o;
        o.refresh = refresh;
        Result<HostMap> r = without_gil([&] { return host_map_obtain(o); });
        HostMap h = value_or_raise(std::move(r));
        return py::module_::import("json").attr("loads")(host_map_to_json(h));
      },
      py::arg("refresh") = false, "This host's map (docs/formats/host-map.md) as a dict.");
  m.def(
      "connect",
      [](const std::string& uri, const std::string& token, const std::string& token_file, const std::string& client) {
        ConnectOptions o{token, token_file, client};
        return value_or_raise(without_gil([&] { return connect(uri, o); }));
      },
      py::arg("uri") = "local", py::arg("token") = "", py::arg("token_file") = "", py::arg("client") = "",
      "\"local\": this process; \"unix:///path\": the daemon listening there, as the tenant whose token is\n"
      "given (else $TESSERA_TOKEN or $TESSERA_TOKEN_FILE).");
  m.def("token_hash", [](const std::string& token) { return token_hash(token); },
        "The SHA-256 hex of a token, as tesserad's config stores it.");
  m.def("set_log_level", [](const std::string& level) {
    const std::map<std::string, LogLevel> levels = {{"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
                                                    {"warning", LogLevel::kWarning}, {"error", LogLevel::kError},
                                                    {"quiet", LogLevel::kQuiet}};
    auto it = levels.find(level);
    if (it == levels.end()) raise(invalid_argument("log level must be debug, info, warning, error or quiet"));
    log_set_level(it->second);
  });

  for (const char* name : {"Future", "Session", "Model", "Runtime"})
    reinterpret_cast<PyTypeObject*>(m.attr(name).ptr())->tp_new = refuse_new;
}
