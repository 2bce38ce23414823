// Overlapping requests: submit() returns at once with an Event, the
// session serves requests in order on a thread of its own, and the caller
// is free meanwhile (here it prepares the next inputs, then waits).
//
//   build/bin/async build/zoo/mobilenet_v2.onnx 8
#include <tessera/tessera.h>

#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx|MODEL.tsx [REQUESTS]\n", argv[0]);
    return 2;
  }
  const int requests = argc == 3 ? std::atoi(argv[2]) : 4;
  tessera::Result<tessera::Model> model = tessera::connect()->compile(argv[1]);
  tessera::Result<tessera::Session> session = model.ok() ? model->session() : tessera::Result<tessera::Session>(model.status());
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  // One input set per request: a submitted request reads its inputs when it
  // starts, so they must stay unchanged until its Event finishes.
  std::vector<tessera::NamedTensors> inputs(static_cast<size_t>(requests));
  std::vector<tessera::Event> events;
  for (int r = 0; r < requests; ++r) {
    for (const tessera::TensorInfo& i : session->inputs()) {
      tessera::Tensor t(i.dtype, i.shape);
      for (int64_t k = 0; k < t.numel() && i.dtype == tessera::DType::kFloat32; ++k) t.data<float>()[k] = 0.01f * r;
      inputs[static_cast<size_t>(r)].set(i.name, t);
    }
    events.push_back(session->submit(inputs[static_cast<size_t>(r)]));
    events.back().then([r](const tessera::Status& st) {
      if (!st.ok()) std::fprintf(stderr, "request %d: %s\n", r, st.to_string().c_str());
    });
  }
  std::printf("%d requests submitted; waiting\n", requests);
  for (int r = 0; r < requests; ++r) {
    tessera::Result<tessera::NamedTensors> out = events[static_cast<size_t>(r)].outputs();
    if (!out.ok()) return 1;
    const tessera::Tensor& y = out->begin()->second;
    std::printf("request %d: %s %s, first value %g\n", r, out->begin()->first.c_str(),
                tessera::shape_string(y.shape()).c_str(), y.numel() ? y.value_as_double(0) : 0.0);
  }
  tessera::RunBreakdown b = session->last_breakdown();
  std::printf("last request: queued %.3f ms, computed %.3f ms\n", b.queue_ms, b.compute_ms);
  return 0;
}
