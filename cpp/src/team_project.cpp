// team_project(): the team edit projection on one-word bitset rows (N <= 64: bit v of row u is the edge u -> v).
// Each graph's phases are reference._project_one's, check for check; the sets the reference keeps (dying nodes,
// fresh slots, removed and added edges) are words or rows of words here. The accepted children are written
// straight into new_node, which doubles as the placeholder table of the edge phases.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "bits.hpp"
#include "parallel.hpp"
#include "toporoute/team_project.hpp"

namespace toporoute {
namespace {

using Word = std::uint64_t;

constexpr std::int32_t kGenerationMax = 2147483646;  // a child gets its slot's generation + 1

inline Word bit(std::int64_t i) { return Word{1} << i; }
inline bool has(Word x, std::int64_t i) { return (x >> i) & 1u; }
inline std::int64_t lowest(Word x) { return __builtin_ctzll(x); }

// The input problems of one graph, in the order the reference checks them.
enum Problem : int { kNoProblem = 0, kSink, kSelfLoop, kStray, kRole, kScore, kGeneration };

std::string s(std::int64_t x) { return std::to_string(x); }

// Graph b's inputs loaded and checked: rows, alive word, roles, scores and generations of its N slots.
struct Loaded {
  Word rows[kTeamMaxNodes];
  Word alive = 0;
  std::int32_t role[kTeamMaxNodes];
  float score[kTeamMaxNodes];
  std::int32_t gen[kTeamMaxNodes];
  std::int64_t sink = 0;
};

int load(const TeamProjectArgs& a, std::int64_t b, Loaded& g) {
  const std::int64_t N = a.N;
  detail::load_bits(a.alive + b * a.a_sb, a.a_sn, N, &g.alive);
  g.sink = a.sink[b * a.si_sb];
  if (g.sink < 0 || g.sink >= N || !has(g.alive, g.sink)) return kSink;
  for (std::int64_t u = 0; u < N; ++u) detail::load_bits(a.adj + b * a.adj_sb + u * a.adj_sr, a.adj_sc, N, &g.rows[u]);
  Word loops = 0, stray = 0;
  for (std::int64_t u = 0; u < N; ++u) {
    loops |= g.rows[u] & bit(u);
    stray |= g.rows[u] & ~(has(g.alive, u) ? g.alive : Word{0});
  }
  if (loops != 0) return kSelfLoop;
  if (stray != 0) return kStray;
  for (std::int64_t n = 0; n < N; ++n) {
    g.role[n] = a.roles[b * a.ro_sb + n * a.ro_sn];
    if (g.role[n] < 0 && has(g.alive, n)) return kRole;
  }
  for (std::int64_t n = 0; n < N; ++n) {
    g.score[n] = a.scores != nullptr ? a.scores[b * a.sc_sb + n * a.sc_sn] : 0.0f;
    if (!std::isfinite(g.score[n]) && has(g.alive, n)) return kScore;
  }
  for (std::int64_t n = 0; n < N; ++n) {
    g.gen[n] = a.generation != nullptr ? a.generation[b * a.ge_sb + n * a.ge_sn] : 0;
    if (g.gen[n] < 0 || g.gen[n] > kGenerationMax) return kGeneration;
  }
  return kNoProblem;
}

// The Status of graph b's first input problem, worded as reference.check_team_inputs.
Status input_error(const TeamProjectArgs& a, std::int64_t b) {
  Loaded g;
  const int problem = load(a, b, g);
  const std::int64_t N = a.N;
  const std::string at = "[" + s(b) + ", ";
  switch (problem) {
    case kSink:
      if (g.sink < 0 || g.sink >= N) {
        return Status::error(StatusCode::out_of_range, "sink",
                             "sink[" + s(b) + "] must be in [0, " + s(N) + "); got " + s(g.sink));
      }
      return Status::error(StatusCode::invalid_argument, "sink",
                           "sink[" + s(b) + "] = " + s(g.sink) + " must be alive; got alive" + at + s(g.sink) +
                               "] False");
    case kSelfLoop:
      for (std::int64_t u = 0;; ++u) {
        if (has(g.rows[u], u)) {
          return Status::error(StatusCode::invalid_argument, "adj",
                               "adj must have no self-loop; got adj" + at + s(u) + ", " + s(u) + "] True");
        }
      }
    case kStray:
      for (std::int64_t u = 0;; ++u) {
        const Word bad = g.rows[u] & ~(has(g.alive, u) ? g.alive : Word{0});
        if (bad != 0) {
          const std::int64_t v = lowest(bad);
          const std::int64_t dead = has(g.alive, u) ? v : u;
          return Status::error(StatusCode::invalid_argument, "adj",
                               "adj must have no edge touching a dead node; got adj" + at + s(u) + ", " + s(v) +
                                   "] with alive" + at + s(dead) + "] False");
        }
      }
    case kRole:
      for (std::int64_t n = 0;; ++n) {
        if (g.role[n] < 0 && has(g.alive, n)) {
          return Status::error(StatusCode::out_of_range, "roles",
                               "roles must be >= 0 for alive nodes; got roles" + at + s(n) + "] = " + s(g.role[n]));
        }
      }
    case kScore:
      for (std::int64_t n = 0;; ++n) {
        if (!std::isfinite(g.score[n]) && has(g.alive, n)) {
          return Status::error(StatusCode::non_finite, "scores",
                               "scores must be finite for alive nodes; got NaN or infinity at scores" + at + s(n) +
                                   "]");
        }
      }
    case kGeneration:
      for (std::int64_t n = 0;; ++n) {
        if (g.gen[n] < 0 || g.gen[n] > kGenerationMax) {
          return Status::error(StatusCode::out_of_range, "generation",
                               "generation must be in [0, " + s(kGenerationMax) + "]; got generation" + at + s(n) +
                                   "] = " + s(g.gen[n]));
        }
      }
    default:
      return Status::error(StatusCode::runtime, "", "team_project: input_error called on a valid graph");
  }
}

// The highest key among the nodes of `candidates` (ascending; ties to the lower index), or -1 when empty.
template <class Key>
std::int64_t best_of(Word candidates, Key key) {
  std::int64_t best = -1;
  for (Word c = candidates; c != 0; c &= c - 1) {
    const std::int64_t v = lowest(c);
    if (best < 0 || key(v) > key(best)) best = v;
  }
  return best;
}

// One bitset row as N bytes 0 / 1; the empty rows most of inherited and repaired hold are one memset.
void store_row(Word row, std::int64_t N, std::uint8_t* out) {
  if (row == 0) {
    std::memset(out, 0, static_cast<std::size_t>(N));
  } else {
    detail::store_bits(&row, N, out);
  }
}

// Grows `reach` (nodes that reach the sink) to its fixpoint over the nodes of `alive`.
Word close_reach(const Word* rows, Word alive, Word reach) {
  for (bool grew = true; grew;) {
    grew = false;
    for (Word c = alive & ~reach; c != 0; c &= c - 1) {
      const std::int64_t u = lowest(c);
      if ((rows[u] & reach) != 0) {
        reach |= bit(u);
        grew = true;
      }
    }
  }
  return reach;
}

// One graph; returns its input problem (outputs unwritten) or kNoProblem.
int project_graph(const TeamProjectArgs& a, const TeamProjectOut& o, std::int64_t b) {
  Loaded g;
  const int problem = load(a, b, g);
  if (problem != kNoProblem) return problem;
  const std::int64_t N = a.N, P = a.P, sink = g.sink;
  const Word all = N == 64 ? ~Word{0} : bit(N) - 1;
  std::int8_t* reason = o.reason + b * P;
  std::uint8_t* accepted = o.accepted + b * P;
  std::int32_t* new_node = o.new_node + b * P;  // the child of an accepted REPLACE / BIRTH row: placeholders
  const auto row_of = [&](std::int64_t p) { return a.edits + b * a.e_sb + p * a.e_sp; };
  const auto kind_of = [&](std::int64_t p) { return static_cast<std::int64_t>(row_of(p)[0]); };
  const auto col = [&](std::int64_t p, int c) { return static_cast<std::int64_t>(row_of(p)[c * a.e_sc]); };
  const auto accept = [&](std::int64_t p) {
    accepted[p] = 1;
    reason[p] = static_cast<std::int8_t>(TeamReason::ok);
  };
  const auto reject = [&](std::int64_t p, TeamReason r) { reason[p] = static_cast<std::int8_t>(r); };
  const auto pending = [&](std::int64_t p, TeamKind k) {
    return kind_of(p) == static_cast<std::int64_t>(k) && reason[p] == static_cast<std::int8_t>(TeamReason::ok);
  };
  const Word in_alive = g.alive;
  const auto slot_ok = [&](std::int64_t x) { return x >= 0 && x < N && has(in_alive, x); };

  // Screening
  for (std::int64_t p = 0; p < P; ++p) {
    accepted[p] = 0;
    new_node[p] = -1;
    const std::int64_t kind = kind_of(p), x = col(p, 1), y = col(p, 2), role = col(p, 3);
    TeamReason r = TeamReason::ok;
    if (kind == static_cast<std::int64_t>(TeamKind::padding)) {
      r = TeamReason::padding;
    } else if (kind < static_cast<std::int64_t>(TeamKind::replace) ||
               kind > static_cast<std::int64_t>(TeamKind::edge_remove)) {
      r = TeamReason::bad_kind;
    } else if (kind >= static_cast<std::int64_t>(TeamKind::edge_add)) {
      if ((x > -2 && !slot_ok(x)) || (y > -2 && !slot_ok(y))) {
        r = TeamReason::unknown_node;
      } else if (x == y) {
        r = TeamReason::self_loop;
      }
    } else if (x <= -2) {
      r = TeamReason::placeholder;
    } else if (!(slot_ok(x) || (kind == static_cast<std::int64_t>(TeamKind::birth) && x == kTeamBestScorer))) {
      r = TeamReason::unknown_node;
    } else if (kind != static_cast<std::int64_t>(TeamKind::death) && role < 0) {
      r = TeamReason::bad_role;
    }
    reason[p] = static_cast<std::int8_t>(r);
  }

  // Phase D: REPLACE and DEATH rows
  Word dying = 0, fresh = ~in_alive & all, children = 0;
  std::int32_t heir[kTeamMaxNodes];       // a dying node's REPLACE child, or -1
  std::int32_t child_role[kTeamMaxNodes];  // valid on `children`
  std::int32_t parent[kTeamMaxNodes];      // a BIRTH child's parent, or -1
  for (std::int64_t n = 0; n < N; ++n) heir[n] = parent[n] = -1;
  const std::int64_t n_alive = detail::popcount64(in_alive);
  std::int64_t deaths = 0, pure_deaths = 0, births = 0, pure_births = 0;
  const auto survivors_of = [&](std::int64_t r) {
    std::int64_t count = 0;
    for (Word c = in_alive & ~dying; c != 0; c &= c - 1) count += g.role[lowest(c)] == r;
    for (Word c = children; c != 0; c &= c - 1) count += child_role[lowest(c)] == r;  // REPLACE children only here
    return count;
  };
  for (std::int64_t p = 0; p < P; ++p) {
    const bool replace = pending(p, TeamKind::replace);
    if (!replace && !pending(p, TeamKind::death)) continue;
    const std::int64_t x = col(p, 1), role = col(p, 3), r = g.role[x];
    const bool pure = !replace;
    if (x == sink) {
      reject(p, TeamReason::sink);
    } else if (a.protected_ != nullptr && a.protected_[b * a.pr_sb + x * a.pr_sn] != 0) {
      reject(p, TeamReason::protected_node);
    } else if (has(dying, x)) {
      reject(p, TeamReason::duplicate);
    } else if (deaths + 1 > a.budget_pairs || (!pure && births + 1 > a.budget_pairs)) {
      reject(p, TeamReason::budget_nodes);
    } else if (pure && pure_deaths + 1 > a.max_pure_deaths) {
      reject(p, TeamReason::budget_pure);
    } else if (r < a.R && a.critical[b * a.cr_sb + r * a.cr_sr] != 0 && survivors_of(r) <= 1 &&
               (pure || role != r)) {
      reject(p, TeamReason::critical_role);
    } else if (pure && n_alive - pure_deaths - 1 < a.n_min) {
      reject(p, TeamReason::min_nodes);
    } else if (!pure && fresh == 0) {
      reject(p, TeamReason::no_capacity);
    } else {
      accept(p);
      dying |= bit(x);
      ++deaths;
      if (pure) {
        ++pure_deaths;
      } else {
        const std::int64_t child = lowest(fresh);
        fresh &= fresh - 1;
        ++births;
        new_node[p] = static_cast<std::int32_t>(child);
        heir[x] = static_cast<std::int32_t>(child);
        children |= bit(child);
        child_role[child] = static_cast<std::int32_t>(role);
      }
    }
  }

  // Phase B: BIRTH rows
  const std::int64_t top = best_of(in_alive & ~dying & ~bit(sink), [&](std::int64_t v) { return g.score[v]; });
  const std::int64_t best_parent = top >= 0 ? top : sink;
  for (std::int64_t p = 0; p < P; ++p) {
    if (!pending(p, TeamKind::birth)) continue;
    const std::int64_t x = col(p, 1), role = col(p, 3);
    if (x >= 0 && has(dying, x)) {
      reject(p, TeamReason::dead_node);
    } else if (births + 1 > a.budget_pairs) {
      reject(p, TeamReason::budget_nodes);
    } else if (pure_births + 1 > a.max_pure_births) {
      reject(p, TeamReason::budget_pure);
    } else if (n_alive - pure_deaths + pure_births + 1 > a.n_max) {
      reject(p, TeamReason::max_nodes);
    } else if (fresh == 0) {
      reject(p, TeamReason::no_capacity);
    } else {
      accept(p);
      const std::int64_t child = lowest(fresh);
      fresh &= fresh - 1;
      ++births;
      ++pure_births;
      new_node[p] = static_cast<std::int32_t>(child);
      parent[child] = static_cast<std::int32_t>(x == kTeamBestScorer ? best_parent : x);
      children |= bit(child);
      child_role[child] = static_cast<std::int32_t>(role);
    }
  }

  // Apply deaths, then births
  Word before[kTeamMaxNodes];
  for (std::int64_t u = 0; u < N; ++u) {
    before[u] = g.rows[u];
    g.rows[u] = has(dying, u) ? 0 : g.rows[u] & ~dying;
  }
  const auto heir_of = [&](std::int64_t u) -> std::int64_t { return has(dying, u) ? heir[u] : u; };
  for (Word c = dying; c != 0; c &= c - 1) {
    const std::int64_t d = lowest(c), child = heir[d];
    if (child < 0) continue;
    for (std::int64_t u = 0; u < N; ++u) {
      const std::int64_t h = has(before[u], d) ? heir_of(u) : -1;
      if (h >= 0) g.rows[h] |= bit(child);
    }
    for (Word w = before[d]; w != 0; w &= w - 1) {
      const std::int64_t h = heir_of(lowest(w));
      if (h >= 0) g.rows[child] |= bit(h);
    }
  }
  for (Word c = children; c != 0; c &= c - 1) {
    const std::int64_t ch = lowest(c);
    if (parent[ch] >= 0) {
      g.rows[parent[ch]] |= bit(ch);
      g.rows[ch] |= bit(sink);
    }
  }
  const Word alive = (in_alive & ~dying) | children;
  Word inherited[kTeamMaxNodes];
  for (std::int64_t u = 0; u < N; ++u) inherited[u] = g.rows[u] & ~before[u];

  // Phase R (EDGE_REMOVE rows), then phase A (EDGE_ADD rows)
  Word removed[kTeamMaxNodes] = {}, added[kTeamMaxNodes] = {};
  std::int64_t n_removed = 0, n_added = 0;
  const auto resolve = [&](std::int64_t x) -> std::int64_t {
    if (x > -2) return x;
    const std::int64_t row = -2 - x;
    return row < P ? new_node[row] : -1;
  };
  for (const TeamKind phase : {TeamKind::edge_remove, TeamKind::edge_add}) {
    const bool remove = phase == TeamKind::edge_remove;
    for (std::int64_t p = 0; p < P; ++p) {
      if (!pending(p, phase)) continue;
      const std::int64_t u = resolve(col(p, 1)), v = resolve(col(p, 2));
      if (u < 0 || v < 0) {
        reject(p, TeamReason::placeholder);
      } else if (has(dying, u) || has(dying, v)) {
        reject(p, TeamReason::dead_node);
      } else if (has(remove ? removed[u] : added[u], v)) {
        reject(p, TeamReason::duplicate);
      } else if (remove && !has(g.rows[u], v)) {
        reject(p, TeamReason::edge_missing);
      } else if (!remove && has(removed[u], v)) {
        reject(p, TeamReason::conflict);
      } else if (!remove && has(g.rows[u], v)) {
        reject(p, TeamReason::edge_exists);
      } else if ((remove && n_removed + 1 > a.max_removals) || n_removed + n_added + 1 > a.budget_edges) {
        reject(p, TeamReason::budget_edges);
      } else {
        accept(p);
        if (remove) {
          removed[u] |= bit(v);
          g.rows[u] &= ~bit(v);
          inherited[u] &= ~bit(v);  // a removed wiring edge is no longer reported as inherited
          ++n_removed;
        } else {
          added[u] |= bit(v);
          g.rows[u] |= bit(v);
          ++n_added;
        }
      }
    }
  }

  // Repair (i): isolated non-sink nodes (a snapshot) link to the best scorer, children counting as -inf
  Word repaired[kTeamMaxNodes] = {};
  Word has_in = 0;
  for (std::int64_t u = 0; u < N; ++u) has_in |= g.rows[u];
  Word isolated = 0;
  for (Word c = alive & ~has_in & ~bit(sink); c != 0; c &= c - 1) {
    if (g.rows[lowest(c)] == 0) isolated |= bit(lowest(c));
  }
  const auto rank = [&](std::int64_t v) {
    return has(children, v) ? -HUGE_VAL : static_cast<double>(g.score[v]);
  };
  for (Word c = isolated; c != 0; c &= c - 1) {
    const std::int64_t v = lowest(c);
    const std::int64_t found = best_of(alive & ~bit(v) & ~bit(sink), rank);
    const std::int64_t best = found >= 0 ? found : sink;
    g.rows[v] |= bit(best);
    repaired[v] |= bit(best);
  }
  // Repair (ii): lowest index first, a node that does not reach the sink links to it
  Word reach = close_reach(g.rows, alive, bit(sink));
  for (Word c = alive & ~reach; c != 0; c &= c - 1) {
    const std::int64_t v = lowest(c);
    if (has(reach, v)) continue;
    g.rows[v] |= bit(sink);
    repaired[v] |= bit(sink);
    reach = close_reach(g.rows, alive, reach | bit(v));
  }

  // Store
  detail::store_bits(&alive, N, o.alive + b * N);
  for (std::int64_t u = 0; u < N; ++u) {
    const std::int64_t at = (b * N + u) * N;
    store_row(g.rows[u], N, o.adj + at);
    store_row(inherited[u], N, o.inherited + at);
    store_row(repaired[u], N, o.repaired + at);
    o.roles[b * N + u] = has(children, u) ? child_role[u] : has(alive, u) ? g.role[u] : -1;
    o.generation[b * N + u] = g.gen[u] + (has(children, u) ? 1 : 0);
  }
  return kNoProblem;
}

Status check_args(const TeamProjectArgs& a) {
  if (a.N < 1 || a.N > kTeamMaxNodes) {
    return Status::error(StatusCode::invalid_argument, "adj",
                         "adj must hold 1 to " + s(kTeamMaxNodes) + " nodes; got N = " + s(a.N));
  }
  if (a.B < 0 || a.P < 0 || a.R < 0) {
    return Status::error(StatusCode::invalid_argument, "edits", "team_project: negative batch, row or role count");
  }
  if (a.R > 0 && a.critical == nullptr) {
    return Status::error(StatusCode::invalid_argument, "critical", "critical must be given when R > 0");
  }
  const std::pair<std::int64_t, const char*> scalars[] = {
      {a.budget_pairs, "budget_pairs"},       {a.budget_edges, "budget_edges"}, {a.max_removals, "max_removals"},
      {a.max_pure_births, "max_pure_births"}, {a.max_pure_deaths, "max_pure_deaths"}, {a.n_min, "n_min"},
      {a.n_max, "n_max"}};
  for (const auto& [value, name] : scalars) {
    if (value < 0) {
      return Status::error(StatusCode::out_of_range, name, std::string(name) + " must be >= 0; got " + s(value));
    }
  }
  if (a.n_max < a.n_min) {
    return Status::error(StatusCode::invalid_argument, "n_max",
                         "n_max must be >= n_min = " + s(a.n_min) + "; got " + s(a.n_max));
  }
  return Status::success();
}

}  // namespace

Status team_project(const TeamProjectArgs& a, const TeamProjectOut& o) {
  TOPOROUTE_RETURN_IF_ERROR(check_args(a));
  const std::int64_t B = a.B;
  const std::int64_t work = B * (a.N * a.N + a.P * 16);
  detail::FirstError bad(B);
  if (work < detail::kParallelWork) {
    for (std::int64_t b = 0; b < B && !bad.any(); ++b) {
      if (project_graph(a, o, b) != kNoProblem) bad.record(b);
    }
  } else {
#pragma omp parallel for num_threads(detail::team_size(B)) schedule(dynamic, 16)
    for (std::int64_t b = 0; b < B; ++b) {
      if (project_graph(a, o, b) != kNoProblem) bad.record(b);
    }
  }
  if (bad.any()) return input_error(a, bad.get());
  return Status::success();
}

}  // namespace toporoute
