// Tile-sized single-threaded SGEMM across the candidate math libraries.
//
// Each rTask of a MatMul/Gemm/Conv calls one GEMM on a tile, on one vEU, so
// what matters is single-thread speed on small and medium problems, including
// per-call overhead. Shared libraries are opened with RTLD_LOCAL so that
// OpenBLAS and BLIS (both export cblas_sgemm) can be compared in one process;
// libxsmm ships only static archives and is linked in without a BLAS
// fallback, so it is reported only where its JIT dispatch accepts the shape.
// The libraries run interleaved on identical inputs; medians are reported.
//
// Usage: gemm_tiles [--reps N]   (build with `make bench-gemm`)
#include <dlfcn.h>
#include <libxsmm.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Shape { int m, n, k; const char* what; };

// Row-major C[m,n] = A[m,k] * B[k,n].
using GemmFn = std::function<bool(const Shape&, const float*, const float*, float*)>;

struct Lib { std::string name; GemmFn fn; };

void* open_lib(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) std::fprintf(stderr, "skip %s: %s\n", path, dlerror());
  return h;
}

std::vector<Lib> load_libs() {
  std::vector<Lib> libs;
  // oneDNN (OpenMP runtime: one thread per call).
  if (void* h = open_lib("libdnnl.so.2")) {
    using Sgemm = int (*)(char, char, long, long, long, float, const float*, long,
                          const float*, long, float, float*, long);
    auto sgemm = reinterpret_cast<Sgemm>(dlsym(h, "dnnl_sgemm"));
    libs.push_back({"oneDNN", [sgemm](const Shape& s, const float* a, const float* b, float* c) {
      return sgemm('N', 'N', s.m, s.n, s.k, 1.f, a, s.k, b, s.n, 0.f, c, s.n) == 0;
    }});
  }
  // OpenBLAS, forced serial.
  if (void* h = open_lib("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0")) {
    using SetThreads = void (*)(int);
    reinterpret_cast<SetThreads>(dlsym(h, "openblas_set_num_threads"))(1);
    using Cblas = void (*)(int, int, int, int, int, int, float, const float*, int,
                           const float*, int, float, float*, int);
    auto sgemm = reinterpret_cast<Cblas>(dlsym(h, "cblas_sgemm"));
    libs.push_back({"OpenBLAS", [sgemm](const Shape& s, const float* a, const float* b, float* c) {
      sgemm(101, 111, 111, s.m, s.n, s.k, 1.f, a, s.k, b, s.n, 0.f, c, s.n);  // RowMajor, NoTrans
      return true;
    }});
  }
  // BLIS (OpenMP build), one thread.
  if (void* h = open_lib("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4")) {
    using SetThreads = void (*)(long);
    reinterpret_cast<SetThreads>(dlsym(h, "bli_thread_set_num_threads"))(1);
    using Cblas = void (*)(int, int, int, int, int, int, float, const float*, int,
                           const float*, int, float, float*, int);
    auto sgemm = reinterpret_cast<Cblas>(dlsym(h, "cblas_sgemm"));
    libs.push_back({"BLIS", [sgemm](const Shape& s, const float* a, const float* b, float* c) {
      sgemm(101, 111, 111, s.m, s.n, s.k, 1.f, a, s.k, b, s.n, 0.f, c, s.n);
      return true;
    }});
  }
  // XNNPACK fully-connected: out[m,n] = in[m,k] * W^T with W[n,k] packed at
  // creation (the weights of a layer are constant, so packing is not timed).
  if (void* h = open_lib("libXNNPACK.so.0")) {
    using Init = int (*)(const void*);
    using Create = int (*)(size_t, size_t, size_t, size_t, const float*, const float*, float,
                           float, uint32_t, void**);
    using Setup = int (*)(void*, size_t, const float*, float*, void*);
    using Run = int (*)(void*, void*);
    auto init = reinterpret_cast<Init>(dlsym(h, "xnn_initialize"));
    auto create = reinterpret_cast<Create>(dlsym(h, "xnn_create_fully_connected_nc_f32"));
    auto setup = reinterpret_cast<Setup>(dlsym(h, "xnn_setup_fully_connected_nc_f32"));
    auto run = reinterpret_cast<Run>(dlsym(h, "xnn_run_operator"));
    if (init(nullptr) == 0) {
      struct Cache { Shape s{}; void* op = nullptr; const float* b = nullptr; };
      auto cache = std::make_shared<Cache>();
      libs.push_back({"XNNPACK", [=](const Shape& s, const float* a, const float* b, float* c) {
        if (cache->op == nullptr || cache->s.m != s.m || cache->s.n != s.n || cache->s.k != s.k ||
            cache->b != b) {
          std::vector<float> wt(static_cast<size_t>(s.n) * s.k);
          for (int i = 0; i < s.k; ++i)
            for (int j = 0; j < s.n; ++j) wt[static_cast<size_t>(j) * s.k + i] = b[static_cast<size_t>(i) * s.n + j];
          if (create(s.k, s.n, s.k, s.n, wt.data(), nullptr, -INFINITY, INFINITY, 0, &cache->op) != 0)
            return false;
          cache->s = s;
          cache->b = b;
        }
        return setup(cache->op, s.m, a, c, nullptr) == 0 && run(cache->op, nullptr) == 0;
      }});
    }
  }
  // libxsmm JIT (column-major: C^T = B^T A^T).
  libxsmm_init();
  libs.push_back({"libxsmm", [](const Shape& s, const float* a, const float* b, float* c) {
    float alpha = 1.f, beta = 0.f;
    libxsmm_smmfunction k = libxsmm_smmdispatch(s.n, s.m, s.k, &s.n, &s.k, &s.n, &alpha, &beta,
                                                nullptr, nullptr);
    if (k == nullptr) return false;
    k(b, a, c);
    return true;
  }});
  return libs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 41;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);

  const std::vector<Shape> shapes = {
      {64, 64, 64, "small square tile"},
      {128, 128, 128, "medium square tile"},
      {64, 196, 576, "conv3x3 64ch 14x14 (oc block x pixels x k)"},
      {32, 784, 288, "conv3x3 32ch 28x28 block"},
      {128, 49, 1152, "conv3x3 128ch 7x7"},
      {64, 128, 256, "BERT-tiny FFN row block"},
      {64, 64, 128, "BERT-tiny attention QK^T"},
      {1, 1024, 256, "LSTM step (1 x 4h x h)"},
      {16, 256, 256, "MLP row block"},
      {256, 256, 256, "large tile"},
  };
  auto libs = load_libs();
  std::printf("%-44s", "shape (m x n x k)");
  for (auto& l : libs) std::printf(" %10s", l.name.c_str());
  std::printf("   (GFLOP/s, single thread, median of %d)\n", reps);

  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
    std::vector<float> ref(static_cast<size_t>(s.m) * s.n), c(ref.size());
    std::srand(1);
    for (auto& x : a) x = static_cast<float>(std::rand()) / RAND_MAX - 0.5f;
    for (auto& x : b) x = static_cast<float>(std::rand()) / RAND_MAX - 0.5f;
    for (int i = 0; i < s.m; ++i)
      for (int j = 0; j < s.n; ++j) {
        double acc = 0;
        for (int p = 0; p < s.k; ++p) acc += double(a[size_t(i) * s.k + p]) * b[size_t(p) * s.n + j];
        ref[size_t(i) * s.n + j] = static_cast<float>(acc);
      }
    std::vector<std::vector<double>> times(libs.size());
    std::vector<bool> ok(libs.size(), true);
    // Inner repetition so that each sample lasts a few microseconds at least.
    const double flop = 2.0 * s.m * s.n * s.k;
    const int inner = std::max(1, static_cast<int>(2e6 / flop));
    for (int r = 0; r < reps + 3; ++r) {
      for (size_t l = 0; l < libs.size(); ++l) {
        if (!ok[l]) continue;
        auto t0 = Clock::now();
        for (int i = 0; i < inner; ++i)
          if (!libs[l].fn(s, a.data(), b.data(), c.data())) { ok[l] = false; break; }
        auto t1 = Clock::now();
        if (r == 0 && ok[l]) {  // check the answer once
          double err = 0, nrm = 0;
          for (size_t i = 0; i < c.size(); ++i) { err += (c[i] - ref[i]) * (c[i] - ref[i]); nrm += ref[i] * ref[i]; }
          if (std::sqrt(err / nrm) > 1e-5) { std::fprintf(stderr, "%s wrong on %s\n", libs[l].name.c_str(), s.what); ok[l] = false; }
        }
        if (r >= 3) times[l].push_back(std::chrono::duration<double>(t1 - t0).count() / inner);
      }
    }
    char label[64];
    std::snprintf(label, sizeof label, "%dx%dx%d", s.m, s.n, s.k);
    std::printf("%-14s %-29.29s", label, s.what);
    for (size_t l = 0; l < libs.size(); ++l) {
      if (!ok[l] || times[l].empty()) std::printf(" %10s", "n/a");
      else std::printf(" %10.1f", flop / median(times[l]) / 1e9);
    }
    std::printf("\n");
  }
  return 0;
}
