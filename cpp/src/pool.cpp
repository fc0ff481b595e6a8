// mean_pool(): masked mean of token states and L2 normalisation per row, in float64 (sentence-transformers
// semantics), OpenMP over the rows of all inputs. Rows are staged and scattered only once every input checked
// out, so a failed call never leaves a half-updated table.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "parallel.hpp"
#include "toporoute/pool.hpp"

namespace toporoute {
namespace {

// "hidden", or "pool[2] hidden" when the inputs are elements of a group argument.
std::string label(const PoolOut& o, std::int64_t input, const char* name) {
  if (o.group == nullptr) return name;
  return std::string(o.group) + "[" + std::to_string(input) + "] " + name;
}

const char* arg_of(const PoolOut& o, const char* name) { return o.group != nullptr ? o.group : name; }

std::int64_t target_row(const PoolArgs& a, std::int64_t i) { return a.rows.present() ? a.rows.at(0, i) : i; }

// Pools row i of `a` into dst (D floats). acc: D doubles of scratch. Returns false when a counted token is not
// finite: NaN and infinities survive the float64 sum (finite float32 values cannot overflow it), so one check
// of the sum of squares covers every element.
bool pool_row(const PoolArgs& a, std::int64_t i, double* acc, float* dst) {
  const std::int64_t D = a.D;
  std::fill(acc, acc + D, 0.0);
  std::int64_t tokens = 0;
  const float* h = a.hidden + i * a.h_sn;
  for (std::int64_t l = 0; l < a.L; ++l) {
    if (a.mask.at(i, l) == 0) continue;
    const float* t = h + l * a.h_sl;
    for (std::int64_t d = 0; d < D; ++d) acc[d] += static_cast<double>(t[d]);
    ++tokens;
  }
  const double count = std::max(static_cast<double>(tokens), 1e-9);
  double ss = 0.0;
  for (std::int64_t d = 0; d < D; ++d) {
    acc[d] /= count;
    ss += acc[d] * acc[d];
  }
  if (!std::isfinite(ss)) return false;
  const double norm = std::max(std::sqrt(ss), 1e-12);
  for (std::int64_t d = 0; d < D; ++d) dst[d] = static_cast<float>(acc[d] / norm);
  return true;
}

Status non_finite_status(const PoolOut& o, const PoolArgs& a, std::int64_t input, std::int64_t i) {
  const std::string name = label(o, input, "hidden");
  for (std::int64_t l = 0; l < a.L; ++l) {
    if (a.mask.at(i, l) == 0) continue;
    const float* t = a.hidden + i * a.h_sn + l * a.h_sl;
    for (std::int64_t d = 0; d < a.D; ++d) {
      if (!std::isfinite(t[d])) {
        return Status::error(StatusCode::non_finite, arg_of(o, "hidden"),
                             name + " must be finite at counted tokens (mask != 0); got NaN or infinity at row " +
                                 std::to_string(i) + ", token " + std::to_string(l));
      }
    }
  }
  return Status::error(StatusCode::non_finite, arg_of(o, "hidden"), name + " must be finite; row " + std::to_string(i));
}

// Shapes and output rows of every input; fills targets (one output row per input row, inputs concatenated).
Status check_inputs(const PoolArgs* in, std::int64_t count, const PoolOut& o, std::vector<std::int64_t>& targets) {
  if (count < 0 || o.M < 0 || o.D < 0 || (o.out == nullptr && o.M * o.D != 0)) {
    return Status::error(StatusCode::invalid_argument, arg_of(o, "out"), "out must be an (M, D) array");
  }
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    const PoolArgs& a = in[b];
    if (a.n < 0 || a.L < 0 || a.D < 0) {
      return Status::error(StatusCode::invalid_argument, arg_of(o, "hidden"),
                           label(o, b, "hidden") + " must have non-negative dimensions");
    }
    if (a.D != o.D) {
      return Status::error(StatusCode::invalid_argument, arg_of(o, "hidden"),
                           label(o, b, "hidden") + " must have " + std::to_string(o.D) +
                               " columns (D of out); got " + std::to_string(a.D));
    }
    if (!a.mask.present() && a.n * a.L != 0) {
      return Status::error(StatusCode::invalid_argument, arg_of(o, "mask"), label(o, b, "mask") + " is missing");
    }
    if (!a.rows.present() && a.n > o.M) {
      return Status::error(StatusCode::invalid_argument, arg_of(o, "out"),
                           "out must have at least " + std::to_string(a.n) + " rows (one per row of " +
                               label(o, b, "hidden") + "); got " + std::to_string(o.M));
    }
    total += a.n;
  }
  targets.clear();
  targets.reserve(static_cast<std::size_t>(total));
  for (std::int64_t b = 0; b < count; ++b) {
    const PoolArgs& a = in[b];
    for (std::int64_t i = 0; i < a.n; ++i) {
      const std::int64_t r = target_row(a, i);
      if (r < 0 || r >= o.M) {
        return Status::error(StatusCode::out_of_range, arg_of(o, "rows"),
                             label(o, b, "rows") + " must be in [0, " + std::to_string(o.M) + "); got " +
                                 std::to_string(r) + " at index " + std::to_string(i));
      }
      targets.push_back(r);
    }
  }
  const bool identity = count == 1 && !in[0].rows.present();
  if (identity || total < 2) return Status::success();
  // Distinct targets: the earliest position whose row was already written is reported.
  std::vector<std::pair<std::int64_t, std::int64_t>> sorted(static_cast<std::size_t>(total));
  for (std::int64_t g = 0; g < total; ++g) {
    sorted[static_cast<std::size_t>(g)] = {targets[static_cast<std::size_t>(g)], g};
  }
  std::sort(sorted.begin(), sorted.end());
  std::int64_t repeat = total;
  for (std::size_t s = 1; s < sorted.size(); ++s) {
    if (sorted[s].first == sorted[s - 1].first) repeat = std::min(repeat, sorted[s].second);
  }
  if (repeat == total) return Status::success();
  std::int64_t b = 0, i = repeat;
  while (i >= in[b].n) i -= in[b++].n;
  return Status::error(StatusCode::invalid_argument, arg_of(o, "rows"),
                       label(o, b, "rows") + " must be distinct" + (o.group != nullptr ? " across all inputs" : "") +
                           "; got row " + std::to_string(targets[static_cast<std::size_t>(repeat)]) +
                           " again at index " + std::to_string(i));
}

}  // namespace

Status mean_pool(const PoolArgs* in, std::int64_t count, const PoolOut& o) {
  std::vector<std::int64_t> targets;
  TOPOROUTE_RETURN_IF_ERROR(check_inputs(in, count, o, targets));
  const auto total = static_cast<std::int64_t>(targets.size());
  const std::int64_t D = o.D;
  if (total == 0) return Status::success();

  std::vector<std::int64_t> start(static_cast<std::size_t>(count + 1), 0);  // first global row of each input
  std::int64_t work = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    start[static_cast<std::size_t>(b + 1)] = start[static_cast<std::size_t>(b)] + in[b].n;
    work += in[b].n * std::max<std::int64_t>(in[b].L, 1) * std::max<std::int64_t>(D, 1);
  }
  detail::ScratchLayout staged;
  staged.take(o.fresh ? 0 : total * D, sizeof(float));
  const detail::TeamScratch staging(staged.bytes(), 1);
  if (!staging.ok()) return staging.failure("mean_pool", "the staging buffer of the pooled rows");
  float* const staging_rows = reinterpret_cast<float*>(staging.slot(0));
  auto locate = [&](std::int64_t g) {
    const auto it = std::upper_bound(start.begin(), start.end(), g);
    const auto b = static_cast<std::int64_t>(it - start.begin()) - 1;
    return std::make_pair(b, g - start[static_cast<std::size_t>(b)]);
  };
  detail::FirstError bad(total);
  auto run = [&](std::int64_t g, double* acc) {
    const auto [b, i] = locate(g);
    float* dst = o.fresh ? o.out + targets[static_cast<std::size_t>(g)] * D : staging_rows + g * D;
    if (!pool_row(in[b], i, acc, dst)) bad.record(g);
  };
  const bool parallel = work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(total) : 1;
  detail::ScratchLayout row;
  row.take(D, sizeof(double));
  const detail::TeamScratch acc(row.bytes(), threads);
  if (!acc.ok()) return acc.failure("mean_pool", "per-thread row accumulators");
  if (!parallel) {
    auto* sum = reinterpret_cast<double*>(acc.slot(0));
    for (std::int64_t g = 0; g < total && !bad.any(); ++g) run(g, sum);
  } else {
#pragma omp parallel num_threads(threads)
    {
      auto* sum = reinterpret_cast<double*>(acc.slot(detail::thread_index()));
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t g = 0; g < total; ++g) run(g, sum);
    }
  }
  if (bad.any()) {
    const auto [b, i] = locate(bad.get());
    return non_finite_status(o, in[b], b, i);
  }
  if (!o.fresh && D > 0) {
    const auto bytes = static_cast<std::size_t>(D) * sizeof(float);
    auto scatter = [&](std::int64_t g) {
      std::memcpy(o.out + targets[static_cast<std::size_t>(g)] * D, staging_rows + g * D, bytes);
    };
    if (total * D < detail::kParallelWork) {
      for (std::int64_t g = 0; g < total; ++g) scatter(g);
    } else {
#pragma omp parallel for schedule(static)
      for (std::int64_t g = 0; g < total; ++g) scatter(g);
    }
  }
  return Status::success();
}

}  // namespace toporoute
