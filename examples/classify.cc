// Classify one input with any image model: loads the model (.onnx or a
// compiled .tsx), runs it on a .npy array and prints the five best classes.
//
//   build/bin/classify build/zoo/resnet18.onnx image.npy
//
// The array must have the model's input shape (1x3x224x224 float32 for
// the zoo's ResNet-18); without one, the example makes a random image.
#include <tessera/tessera.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx|MODEL.tsx [INPUT.npy]\n", argv[0]);
    return 2;
  }
  // 1. Compile for this process's CPU.
  tessera::Result<tessera::Runtime> rt = tessera::connect();
  tessera::Result<tessera::Model> model = rt->compile(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  const tessera::TensorInfo& in = model->inputs().at(0);
  // 2. The input: from the file, or random values of the input's shape.
  tessera::Tensor x;
  if (argc == 3) {
    tessera::Result<tessera::Tensor> loaded = tessera::Tensor::load_npy(argv[2]);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
      return 1;
    }
    x = *loaded;
  } else {
    x = tessera::Tensor(in.dtype, in.shape);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < x.numel() && in.dtype == tessera::DType::kFloat32; ++i) x.data<float>()[i] = normal(rng);
  }
  // 3. A session on the free cores, and one run.
  tessera::Result<tessera::Session> session = model->session();
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  tessera::Result<tessera::NamedTensors> out = session->run({{in.name, x}});
  if (!out.ok()) {
    std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
    return 1;
  }
  // 4. Softmax over the first output's last dimension, the best five.
  const tessera::Tensor& logits = out->begin()->second;
  const int64_t n = logits.shape().empty() ? 1 : logits.shape().back();
  std::vector<double> p(static_cast<size_t>(n));
  double top = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; ++i) top = std::max(top, logits.value_as_double(i));
  for (int64_t i = 0; i < n; ++i) sum += p[static_cast<size_t>(i)] = std::exp(logits.value_as_double(i) - top);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min<size_t>(5, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                    [&](int64_t a, int64_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
  std::printf("%s on %d vEUs, %.3f ms\n", argv[1], session->veus(), session->last_breakdown().compute_ms);
  for (size_t i = 0; i < k; ++i)
    std::printf("class %5lld  p = %.4f\n", static_cast<long long>(order[i]), p[static_cast<size_t>(order[i])] / sum);
  return 0;
}
