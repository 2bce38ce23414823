// The Erf kernel against every float in [0, 4.5] and its negative: within
// 1 ulp of erf computed in double and rounded to float, and the vector path
// (erf_n) bit for bit equal to the scalar one (fast_erf). Beyond 4.5 both
// return +-1 by construction. Prints the worst error and how many floats
// are 1 ulp off; exits 1 on any failure. `make check-erf` (about 30 s on
// two cores); the unit test FastErfWithinOneUlp checks a dense grid of it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "kernels/cpu/fast_math.h"

namespace {

struct Tally {
  uint64_t checked = 0, off_by_one = 0, failures = 0, mismatches = 0;
  float worst_ulps = 0, worst_x = 0;
};

// Checks the floats with bit patterns [begin, end), and their negatives.
Tally check(uint32_t begin, uint32_t end) {
  constexpr uint32_t kBlock = 1 << 16;
  std::vector<float> x(2 * kBlock), y(2 * kBlock);
  Tally t;
  for (uint32_t b = begin; b < end; b += kBlock) {
    const uint32_t n = std::min(kBlock, end - b);
    for (uint32_t k = 0; k < n; ++k) {
      const uint32_t bits = b + k, neg = bits | 0x80000000u;
      std::memcpy(&x[2 * k], &bits, 4);
      std::memcpy(&x[2 * k + 1], &neg, 4);
    }
    tessera::erf_n(x.data(), y.data(), 2 * n);
    for (uint32_t k = 0; k < 2 * n; ++k) {
      const float got = y[k], scalar = tessera::fast_erf(x[k]);
      if (std::memcmp(&got, &scalar, 4) != 0) {
        if (t.mismatches++ < 5) std::printf("x = %a: vector %a, scalar %a\n", x[k], got, scalar);
      }
      const float want = static_cast<float>(std::erf(static_cast<double>(x[k])));
      const float mag = std::fabs(want);
      const float ulp = std::nextafter(mag, std::numeric_limits<float>::infinity()) - mag;
      const float e = x[k] == 0 ? std::fabs(got) : std::fabs(got - want) / ulp;
      ++t.checked;
      if (e > 0) ++t.off_by_one;
      if (!(e <= 1.f)) {
        if (t.failures++ < 5) std::printf("x = %a: %a against %a (%g ulps)\n", x[k], got, want, e);
      }
      if (e > t.worst_ulps) t.worst_ulps = e, t.worst_x = x[k];
    }
  }
  return t;
}

}  // namespace

int main() {
  constexpr float kEnd = 4.5f;
  uint32_t end;
  std::memcpy(&end, &kEnd, 4);
  ++end;  // through 4.5 itself
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> pool;
  std::atomic<uint32_t> next{0};
  constexpr uint32_t kChunk = 1 << 22;
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      for (uint32_t b; (b = next.fetch_add(kChunk)) < end;) {
        const Tally t = check(b, std::min(end, b + kChunk));
        Tally& s = tallies[i];
        s.checked += t.checked, s.off_by_one += t.off_by_one, s.failures += t.failures, s.mismatches += t.mismatches;
        if (t.worst_ulps > s.worst_ulps) s.worst_ulps = t.worst_ulps, s.worst_x = t.worst_x;
      }
    });
  for (auto& t : pool) t.join();
  Tally all;
  for (const Tally& s : tallies) {
    all.checked += s.checked, all.off_by_one += s.off_by_one, all.failures += s.failures;
    all.mismatches += s.mismatches;
    if (s.worst_ulps > all.worst_ulps) all.worst_ulps = s.worst_ulps, all.worst_x = s.worst_x;
  }
  std::printf("erf: %llu floats in [-4.5, 4.5]; worst %.3f ulp (x = %a); %llu (%.2f%%) 1 ulp off; "
              "%llu over 1 ulp; %llu vector/scalar mismatches\n",
              static_cast<unsigned long long>(all.checked), all.worst_ulps, all.worst_x,
              static_cast<unsigned long long>(all.off_by_one), 100.0 * all.off_by_one / all.checked,
              static_cast<unsigned long long>(all.failures), static_cast<unsigned long long>(all.mismatches));
  return all.failures == 0 && all.mismatches == 0 ? 0 : 1;
}
