// Two models at once on one machine, each on cores of its own: the
// process's Runtime gives each session a disjoint set of cores while free
// ones remain, so neither slows the other (where the host has two cores or
// more).
//
//   build/bin/two_sessions build/zoo/resnet18.onnx build/zoo/mobilenet_v2.onnx
#include <tessera/tessera.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace {

// Inputs of the model's shapes, filled with a small constant.
tessera::NamedTensors inputs_for(const tessera::Session& s) {
  tessera::NamedTensors in;
  for (const tessera::TensorInfo& i : s.inputs()) {
    tessera::Tensor t(i.dtype, i.shape);
    for (int64_t k = 0; k < t.numel() && i.dtype == tessera::DType::kFloat32; ++k) t.data<float>()[k] = 0.1f;
    in.set(i.name, t);
  }
  return in;
}

// The median of `runs` runs, in ms.
double median_ms(tessera::Session& s, const tessera::NamedTensors& in, int runs) {
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    if (!s.run(in).ok()) return -1;
    ms.push_back(s.last_breakdown().compute_ms);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL_A MODEL_B (.onnx or .tsx)\n", argv[0]);
    return 2;
  }
  tessera::Result<tessera::Runtime> rt = tessera::connect();
  std::vector<tessera::Session> sessions;
  for (int i = 1; i <= 2; ++i) {
    tessera::Result<tessera::Model> m = rt->compile(argv[i]);
    tessera::Result<tessera::Session> s = m.ok() ? m->session({.veus = 1}) : tessera::Result<tessera::Session>(m.status());
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().to_string().c_str());
      return 1;
    }
    sessions.push_back(*s);
    std::printf("%s: core %d\n", argv[i], s->cores().at(0));
  }
  const int runs = 20;
  std::vector<tessera::NamedTensors> in = {inputs_for(sessions[0]), inputs_for(sessions[1])};
  double alone[2], together[2];
  for (int i = 0; i < 2; ++i) alone[i] = median_ms(sessions[i], in[i], runs);
  std::thread other([&] { together[1] = median_ms(sessions[1], in[1], runs); });
  together[0] = median_ms(sessions[0], in[0], runs);
  other.join();
  for (int i = 0; i < 2; ++i)
    std::printf("%s: median %.3f ms alone, %.3f ms beside the other\n", argv[i + 1], alone[i], together[i]);
  return alone[0] < 0 || alone[1] < 0 || together[0] < 0 || together[1] < 0;
}
