#pragma once
/// \file conductor.hpp
/// AgentConductor plan checking on the CPU: extraction of the YAML block, a parser for the plain block layout
/// orchestrators write, the schema and logic checks and the decoding into a layered DAG, for a batch of plans
/// (OpenMP over plans). Semantics: python/toporoute/conductor_topology.py (check), the oracle every result is
/// tested against.
///
/// The parser reads a strict subset of YAML: block sequences and mappings laid out with spaces (indentless
/// sequences included), identifier keys, one-line flow sequences of scalars, one-line quoted scalars without
/// escapes, plain scalars that PyYAML 1.1 resolves to null (empty, `~`, `null`), an int of at most 18 digits
/// or a string of letters, digits, `<`, `>`, `_`, `-` and inner spaces, and comments. A plan outside it
/// (tabs, bytes outside printable ASCII, anchors, aliases, tags, block scalars, flow mappings, escapes,
/// multi-line scalars, bool or float words, duplicate keys, document markers, nesting beyond max_depth or 64
/// levels, ...) or a text that is not UTF-8 gets kConductorDeferred and is left to the reference, so a
/// caller's result never depends on this parser. Every other code comes with the reference's exact message,
/// block and decoded graph; extraction and the byte limit are always decided here.
#include <cstdint>
#include <string>
#include <vector>

#include "toporoute/status.hpp"

namespace toporoute {

/// Error classes of a checked plan (conductor_topology.OK, NO_YAML, PARSE, SCHEMA, LOGIC).
enum ConductorError : std::uint8_t {
  kConductorOk = 0,
  kConductorNoYaml = 1,
  kConductorParse = 2,
  kConductorSchema = 3,
  kConductorLogic = 4,
  kConductorDeferred = 255,  ///< outside the parsed subset: the caller checks this plan with the reference
};

/// conductor_topology.CheckOptions without the pool. Limits must be >= 1.
struct ConductorOptions {
  bool lenient = true;
  bool strict_tester = false;
  bool concise = false;
  std::int64_t max_bytes = 65536;  ///< UTF-8 bytes of the extracted block
  std::int64_t max_depth = 16;     ///< YAML nesting (the root node is level 1)
  std::int64_t max_agents = 64;    ///< agents per plan
  std::int64_t max_refs = 32;      ///< refs per agent
};

/// Inputs of conductor_check(). Plan b is texts[b] (UTF-8; lone surrogates encoded as by Python's
/// "surrogatepass") checked against context k = ctx_index[b]: turn ctx_turn[k] and the earlier turns' agents
/// ctx_off[k]:ctx_off[k+1] (global indices 0.. within the context), each with an id (UTF-8 bytes), a role
/// (index into pool) and a turn (< ctx_turn[k]). Pool names are the role names tokens use (`<name>`).
struct ConductorArgs {
  const std::string* texts = nullptr;
  std::int64_t B = 0;
  const std::string* pool = nullptr;
  std::int64_t P = 0;
  const std::int64_t* ctx_index = nullptr;  ///< (B,) in [0, C)
  const std::int32_t* ctx_turn = nullptr;   ///< (C,) >= 0
  const std::int64_t* ctx_off = nullptr;    ///< (C+1,) non-decreasing, ctx_off[0] = 0, ctx_off[C] = M
  std::int64_t C = 0;
  const std::string* ctx_id = nullptr;           ///< (M,)
  const std::int16_t* ctx_role = nullptr;        ///< (M,) in [0, P)
  const std::int32_t* ctx_node_turn = nullptr;   ///< (M,)
  std::int64_t M = 0;
  ConductorOptions options;
};

/// Results of conductor_check() in CSR form (python TopologyBatch without contexts and options). Deferred and
/// invalid plans have no nodes, zero counts and (deferred) an empty message.
struct ConductorBatch {
  std::vector<std::uint8_t> error;                 ///< (B,) ConductorError
  std::vector<std::string> message;                ///< (B,) "" when valid or deferred
  std::vector<std::string> yaml;                   ///< (B,) the extracted block
  std::vector<std::uint8_t> has_yaml;              ///< (B,) 0 when no block was found (python None)
  std::vector<std::int64_t> nodes, edges, steps, depth;  ///< (B,) |V|, |E|, s, depth of valid plans
  std::vector<std::int64_t> node_off;              ///< (B+1,)
  std::vector<std::int16_t> node_role;             ///< (N,) index into pool
  std::vector<std::int64_t> node_step;             ///< (N,) step number as written
  std::vector<std::int32_t> node_layer;            ///< (N,) 0-based step position
  std::vector<std::int64_t> node_self;             ///< (N,) self-edge source (global index) or -1
  std::vector<std::int64_t> ref_off;               ///< (N+1,)
  std::vector<std::int64_t> ref_src;               ///< (R,) global index of each ref's target
  std::vector<std::uint8_t> ref_cross;             ///< (R,) 1 when the target lies in an earlier turn
  std::vector<std::string> node_id;                ///< (N,) ASCII ids (`coder_2`)
  std::vector<std::vector<std::string>> warnings;  ///< (B,) "feeds no later agent" warnings
};

/// Everything conductor_check() checks before reading a text: sizes, option limits >= 1, context indices,
/// offsets, roles and node turns. O(B + C + M).
Status check_conductor_args(const ConductorArgs& args);

/// Checks and decodes every plan (check_conductor_args first). Plans are independent: OpenMP over plans
/// (dynamic schedule) from 64 plans on. Cost linear in the text length plus O(V + R) per plan with hashed id
/// lookups; the per-context id tables are built once per context. Never throws; an allocation failure is
/// reported as StatusCode::runtime.
Status conductor_check(const ConductorArgs& args, ConductorBatch* out);

/// Elementwise AgentConductor density (methods/agentconductor.md §4). All arrays length n, contiguous.
struct DensityArgs {
  const std::int64_t* nodes = nullptr;
  const std::int64_t* edges = nullptr;
  const std::int64_t* steps = nullptr;
  const std::int64_t* n_max = nullptr;
  std::int64_t n = 0;
};

struct DensityOut {
  double* s_node = nullptr;
  double* s_edge = nullptr;
  double* s_depth = nullptr;
  double* s_complex = nullptr;
  double* reward = nullptr;
};

/// AgentConductor density terms and r_g, elementwise. O(n).
Status conductor_density(const DensityArgs& args, const DensityOut& out);

}  // namespace toporoute
