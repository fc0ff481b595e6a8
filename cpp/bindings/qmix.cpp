// Q-Mix networks on the CPU: the QMixWeights class (weights packed once per QMixParams) and the per-call
// qmix_forward / qmix_mix entry points. The per-call path is the one that matters at B = 1: fixed-rank views
// (no allocation), two output arrays, one GIL release.
#include <memory>
#include <string>
#include <utility>

#include "qmix_common.hpp"

namespace toporoute::bindings {

QMixConfig qmix_config(const py::handle& config) {
  QMixConfig c;
  auto get = [&config](const char* name) { return config.attr(name); };
  c.obs_dim = get("obs_dim").cast<std::int64_t>();
  c.hidden = get("hidden").cast<std::int64_t>();
  c.n_actions = get("n_actions").cast<std::int64_t>();
  c.head_hidden = get("head_hidden").cast<std::int64_t>();
  c.gnn_layers = get("gnn_layers").cast<std::int64_t>();
  const auto mode = get("adj_mode").cast<std::string>();
  if (!parse_qmix_adj_mode(mode, &c.adj_mode)) {
    raise_error("InvalidArgumentError", "adj_mode", "adj_mode must be one of in, out_rows, sym; got '" + mode + "'");
  }
  c.self_loops = get("self_loops").cast<bool>();
  c.n_agents = get("n_agents").cast<std::int64_t>();
  c.state_dim = get("state_dim").cast<std::int64_t>();
  c.mix_hidden = get("mix_hidden").cast<std::int64_t>();
  c.hyper_hidden = get("hyper_hidden").cast<std::int64_t>();
  c.b1_hidden = get("b1_hidden").cast<bool>();
  c.ln_eps = static_cast<float>(get("ln_eps").cast<double>());
  raise_status(check_qmix_config(c));
  return c;
}

namespace {

std::vector<const float*> checked_tensors(const std::vector<QMixTensorSpec>& specs, const py::handle& obj,
                                          const char* what, std::vector<HostView>& keep) {
  const auto seq = py::reinterpret_borrow<py::sequence>(obj);
  if (!py::isinstance<py::sequence>(obj) || seq.size() != specs.size()) {
    raise_error("InvalidArgumentError", "params",
                std::string("params ") + what + " must be a sequence of " + std::to_string(specs.size()) +
                    " arrays in qmix_params." + what + "_keys order");
  }
  std::vector<const float*> out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const QMixTensorSpec& spec = specs[i];
    const std::string label = "params tensor " + spec.name;
    const char* name = label.c_str();
    HostView v = host_view<float>(seq[i], name, static_cast<int>(spec.shape.size()), false, "params");
    expect_shape(v, name, spec.shape, "params");
    std::int64_t expected = 1;
    for (std::size_t d = spec.shape.size(); d-- > 0;) {
      if (spec.shape[d] > 1 && v.strides[d] != expected) {
        raise_error("DTypeError", "params", label + " must be C-contiguous");
      }
      expected *= spec.shape[d];
    }
    out.push_back(static_cast<const float*>(v.data));
    keep.push_back(std::move(v));
  }
  return out;
}

}  // namespace

void raise_no_mixer() {
  raise_error("InvalidArgumentError", "params", "these qmix params hold no mixer (an inference-only checkpoint)");
}

QMixTensors qmix_tensors(const QMixConfig& c, const py::handle& agent, const py::handle& mixer) {
  QMixTensors t;
  t.agent = checked_tensors(qmix_agent_specs(c), agent, "agent", t.arrays);
  if (!mixer.is_none()) t.mixer = checked_tensors(qmix_mixer_specs(c), mixer, "mixer", t.arrays);
  return t;
}

namespace {

/// The Python-side handle of packed weights (immutable; shared by every thread that calls with it).
struct QMixWeightsHandle {
  std::shared_ptr<const QMixWeights> weights;
};

QMixWeightsHandle make_weights(const py::handle& config, const py::handle& agent, const py::handle& mixer) {
  const QMixConfig c = qmix_config(config);
  const QMixTensors t = qmix_tensors(c, agent, mixer);
  QMixWeightsHandle h;
  run_core("QMixWeights", [&] { return QMixWeights::create(c, t.agent, t.mixer, &h.weights); });
  return h;
}

// The level of one call over `rows` rows (resolve_isa_for_rows with the op's AMX threshold).
Isa resolved_isa(const std::string& isa, std::int64_t rows, std::int64_t amx_min_rows) {
  Isa out;
  raise_status(resolve_isa_for_rows(isa, rows, amx_min_rows, &out));
  return out;
}

std::string qmix_level(const std::string& op, std::int64_t rows, const std::string& isa) {
  if (op != "qmix_forward" && op != "qmix_mix") {
    throw py::value_error("op must be qmix_forward or qmix_mix; got '" + op + "'");
  }
  const std::int64_t min_rows = op == "qmix_forward" ? kQMixForwardAmxMinRows : kQMixMixAmxMinRows;
  return isa_name(resolved_isa(isa, rows, min_rows));
}

py::tuple qmix_forward(const QMixWeightsHandle& h, const py::handle& obs, const py::handle& adj,
                       const py::handle& hidden, const py::handle& active, const std::string& isa) {
  const QMixWeights& w = *h.weights;
  const QMixConfig& c = w.config();
  const QMixForwardArgs args = qmix_forward_args(
      c, fast_view<float, 3>(obs, "obs"), fast_view<std::uint8_t, 3>(adj, "adj", true),
      optional_fast_view<float, 3>(hidden, "hidden"), optional_fast_view<std::uint8_t, 2>(active, "active", true));
  const Isa resolved = resolved_isa(isa, args.B * args.N, kQMixForwardAmxMinRows);
  NewOutputs out("qmix_forward");
  out.add<float>({args.B, args.N, c.n_actions});
  out.add<float>({args.B, args.N, c.hidden});
  py::tuple arrays = out.allocate();
  const QMixForwardOut o{out.data<float>(0), out.data<float>(1)};
  run_core("qmix_forward", [&] { return toporoute::qmix_forward(w, args, o, resolved); });
  return arrays;
}

py::object qmix_mix(const QMixWeightsHandle& h, const py::handle& q_taken, const py::handle& state,
                    const std::string& isa) {
  const QMixWeights& w = *h.weights;
  if (!w.has_mixer()) raise_no_mixer();
  const QMixMixArgs args =
      qmix_mix_args(w.config(), fast_view<float, 2>(q_taken, "q_taken"), fast_view<float, 2>(state, "state"));
  const Isa resolved = resolved_isa(isa, args.B, kQMixMixAmxMinRows);
  NewOutputs out("qmix_mix");
  out.add<float>({args.B});
  py::object q_tot = out.allocate()[0];
  float* dst = out.data<float>(0);
  run_core("qmix_mix", [&] { return toporoute::qmix_mix(w, args, dst, resolved); });
  return q_tot;
}

}  // namespace

namespace {

py::tuple qmix_graph(const py::handle& actions) {
  const FastIntView<2> a = fast_int_view<2>(actions, "actions", false);
  const std::int64_t B = a.v.shape[0], N = a.v.shape[1];
  std::uint8_t* adj = nullptr;
  std::int32_t* debate = nullptr;
  NewOutputs out("qmix_graph");
  out.add<bool>({B, N, N}, &adj);
  out.add<std::int32_t>({B, N}, &debate);
  return out.run([&] { return toporoute::qmix_graph(a.view(), B, N, adj, debate); });
}

}  // namespace

void bind_qmix(py::module_& m) {
  py::class_<QMixWeightsHandle>(m, "QMixWeights",
                                "Agent Q-Mix weights packed for the CPU kernels (immutable; build once per "
                                "QMixParams).")
      .def(py::init(&make_weights), py::arg("config"), py::arg("agent"), py::arg("mixer") = py::none(),
           "QMixWeights(config, agent, mixer=None): config is a QMixConfig; agent / mixer the float32 C arrays of "
           "qmix_params.agent_keys / mixer_keys order (mixer None: no mixer).")
      .def_property_readonly("nbytes", [](const QMixWeightsHandle& h) { return h.weights->bytes(); },
                             "Bytes of packed weights.")
      .def_property_readonly("has_mixer", [](const QMixWeightsHandle& h) { return h.weights->has_mixer(); });
  m.def("qmix_forward", &qmix_forward, py::arg("weights"), py::arg("obs"), py::arg("adj"), py::arg("hidden"),
        py::arg("active"), py::arg("isa") = "",
        "qmix_forward(weights, obs, adj, hidden, active, isa='') -> (q, hidden): the agent network over batched "
        "(B, N, ...) inputs (obs float32, adj bool, hidden float32 or None, active bool or None); outputs "
        "(B, N, n_actions) and (B, N, H) float32.");
  m.def("qmix_mix", &qmix_mix, py::arg("weights"), py::arg("q_taken"), py::arg("state"), py::arg("isa") = "",
        "qmix_mix(weights, q_taken, state, isa='') -> q_tot: the monotonic mixer over (B, n_agents) and (B, S) "
        "float32 inputs; (B,) float32.");
  m.def("qmix_level", &qmix_level, py::arg("op"), py::arg("rows"), py::arg("isa") = "",
        "qmix_level(op, rows, isa='') -> str: the SIMD level a call of op (qmix_forward: rows = B * N agent rows; "
        "qmix_mix: rows = B) runs at: isa when named, else the process default, except avx512 for fewer rows than "
        "the AMX level repays when that default is amx and TOPOROUTE_SIMD is unset.");
  m.def("qmix_graph", &qmix_graph, py::arg("actions"),
        "qmix_graph(actions) -> (adj, debate): Agent Q-Mix's round graph phi of (B, N) int32/int64 joint actions; "
        "(B, N, N) bool and (B, N) int32.");
}

}  // namespace toporoute::bindings
