// route(): one fused pass per episode (stage + norms + dots in the ISA kernel, then score, threshold, self and
// activity masks, top-k_in per recipient and inbox order), OpenMP across episodes.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "parallel.hpp"
#include "simd/gram.hpp"
#include "toporoute/ops.hpp"

namespace toporoute {
namespace {

// Per-thread working memory of one episode, O(N^2); never zero-filled (every entry is written before it is
// read). Allocated once per thread and batch, not per episode.
class Scratch {
 public:
  explicit Scratch(std::int64_t N)
      : doubles_(new double[static_cast<std::size_t>(N * N + 2 * N + 1)]),
        bytes_(new unsigned char[static_cast<std::size_t>(2 * N + 1)]),
        scores_(new float[static_cast<std::size_t>(N + 1)]),
        sources_(new std::int32_t[static_cast<std::size_t>(N + 1)]),
        dots(doubles_.get()),
        kss(dots + N * N),
        qss(kss + N),
        kvalid(bytes_.get()),
        qvalid(kvalid + N),
        sel_score(scores_.get()),
        sel_src(sources_.get()) {}

 private:
  std::unique_ptr<double[]> doubles_;
  std::unique_ptr<unsigned char[]> bytes_;
  std::unique_ptr<float[]> scores_;
  std::unique_ptr<std::int32_t[]> sources_;

 public:
  double *const dots, *const kss, *const qss;  // N x N dot products, |k_j|^2, |q_i|^2 (then |q_i|)
  unsigned char *const kvalid, *const qvalid;  // row active and non-zero
  float* const sel_score;                      // one recipient's kept providers, by descending score
  std::int32_t* const sel_src;
};

// Returns false when a row is not finite (the caller reports the episode).
bool route_episode(const RouteArgs& a, const RouteOut& o, simd::GramFn gram, std::int64_t b, Scratch& s) {
  const std::int64_t N = a.N, K = a.K;
  gram({a.k + b * a.k_sb, a.k_sn, a.q + b * a.q_sb, a.q_sn, N, a.D, s.dots, s.kss, s.qss});
  for (std::int64_t n = 0; n < N; ++n) {
    if (!std::isfinite(s.kss[n]) || !std::isfinite(s.qss[n])) return false;
  }
  for (std::int64_t n = 0; n < N; ++n) {
    const bool act = a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0;
    s.kvalid[n] = act && s.kss[n] > 0.0;
    s.qvalid[n] = act && s.qss[n] > 0.0;
  }
  float* scores = o.scores + b * N * N;
  std::uint8_t* adj = o.adjacency + b * N * N;
  for (std::int64_t i = 0; i < N; ++i) s.qss[i] = std::sqrt(s.qss[i]);  // from here on: |q_i|
  for (std::int64_t j = 0; j < N; ++j) {
    const double kn = std::sqrt(s.kss[j]);
    for (std::int64_t i = 0; i < N; ++i) {
      float v = 0.0f;
      if (s.kvalid[j] && s.qvalid[i]) {
        const double c = s.dots[j * N + i] / (kn * s.qss[i]);
        v = static_cast<float>(std::min(1.0, std::max(-1.0, c)));
      }
      scores[j * N + i] = v;
      adj[j * N + i] = 0;
    }
  }
  // Per recipient: insertion into a list sorted by descending score. Providers arrive in ascending index,
  // so inserting after every entry with an equal score keeps ties to the lower index.
  const std::int64_t cap = a.k_in > 0 ? std::min(a.k_in, N) : N;
  std::int32_t* inbox = o.inbox + b * N * K;
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t count = 0;
    if (s.qvalid[i]) {
      for (std::int64_t j = 0; j < N; ++j) {
        if (j == i || !s.kvalid[j]) continue;
        const float v = scores[j * N + i];
        if (!(v > a.tau)) continue;
        std::int64_t pos = count;
        while (pos > 0 && s.sel_score[pos - 1] < v) --pos;
        if (pos >= cap) continue;
        const std::int64_t last = std::min(count, cap - 1);
        for (std::int64_t r = last; r > pos; --r) {
          s.sel_score[r] = s.sel_score[r - 1];
          s.sel_src[r] = s.sel_src[r - 1];
        }
        s.sel_score[pos] = v;
        s.sel_src[pos] = static_cast<std::int32_t>(j);
        count = std::min(count + 1, cap);
      }
    }
    o.in_degree[b * N + i] = static_cast<std::int32_t>(count);
    for (std::int64_t r = 0; r < K; ++r) inbox[i * K + r] = r < count ? s.sel_src[r] : -1;
    for (std::int64_t r = 0; r < count; ++r) adj[s.sel_src[r] * N + i] = 1;
  }
  return true;
}

Status non_finite_status(const RouteArgs& a, std::int64_t b) {
  for (const char* name : {"q", "k"}) {
    const float* base = name[0] == 'q' ? a.q + b * a.q_sb : a.k + b * a.k_sb;
    const std::int64_t sn = name[0] == 'q' ? a.q_sn : a.k_sn;
    for (std::int64_t n = 0; n < a.N; ++n) {
      for (std::int64_t d = 0; d < a.D; ++d) {
        if (!std::isfinite(base[n * sn + d])) {
          return Status::error(StatusCode::non_finite, name,
                               std::string(name) + " must be finite; got NaN or infinity at episode " +
                                   std::to_string(b) + ", agent " + std::to_string(n));
        }
      }
    }
  }
  return Status::error(StatusCode::non_finite, "q", "q or k holds values whose squares overflow");
}

}  // namespace

Status route(const RouteArgs& a, const RouteOut& o, Isa isa) {
  if (a.B < 0 || a.N < 0 || a.D < 0) {
    return Status::error(StatusCode::invalid_argument, "q", "q must have non-negative dimensions");
  }
  if (!(a.tau >= -1.0f && a.tau <= 1.0f)) {
    return Status::error(StatusCode::out_of_range, "tau", "tau must be in [-1, 1]; got " + std::to_string(a.tau));
  }
  if (a.k_in < 0) {
    return Status::error(StatusCode::out_of_range, "k_in", "k_in must be >= 0; got " + std::to_string(a.k_in));
  }
  const std::int64_t want_k = a.k_in > 0 ? a.k_in : std::max<std::int64_t>(a.N - 1, 0);
  if (a.K != want_k) {
    return Status::error(StatusCode::invalid_argument, "inbox", "inbox width must be " + std::to_string(want_k));
  }
  const simd::GramFn gram = simd::gram_for(isa);
  detail::FirstError bad(a.B);
  const std::int64_t work = a.B * a.N * (a.N + 2) * std::max<std::int64_t>(a.D, 1);
  if (work < detail::kParallelWork) {  // one episode or a few: no thread team at all
    Scratch scratch(a.N);
    for (std::int64_t b = 0; b < a.B; ++b) {
      if (!route_episode(a, o, gram, b, scratch)) {
        bad.record(b);
        break;
      }
    }
  } else {
#pragma omp parallel
    {
      Scratch scratch(a.N);
#pragma omp for schedule(dynamic, 64)
      for (std::int64_t b = 0; b < a.B; ++b) {
        if (!route_episode(a, o, gram, b, scratch)) bad.record(b);
      }
    }
  }
  if (bad.any()) return non_finite_status(a, bad.get());
  return Status::success();
}

}  // namespace toporoute
