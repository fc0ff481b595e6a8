#pragma once
/// \file dispatch.hpp
/// Runtime selection of the SIMD kernels. Each ISA lives in its own translation unit with its own compiler
/// flags; shared code is compiled at baseline flags. The choice is made once per process: the best ISA both
/// compiled and supported by this CPU, or the one named by the TOPOROUTE_SIMD environment variable
/// (generic | avx2 | avx512 | amx). Tests may pass an explicit ISA per call. amx is avx512 with the qmix
/// Linear and GRUCell products on AMX tiles (bf16x3); every other op runs its avx512 kernels at that level, and
/// so do qmix calls too small to repay the tiles unless a level was named (resolve_isa_for_rows).
#include <cstdint>
#include <string>
#include <vector>

#include "toporoute/status.hpp"

namespace toporoute {

enum class Isa : int { generic = 0, avx2 = 1, avx512 = 2, amx = 3 };

const char* isa_name(Isa isa) noexcept;
/// Parses "generic" | "avx2" | "avx512" | "amx".
bool parse_isa(const std::string& name, Isa* out) noexcept;
/// Compiled into this build.
bool isa_compiled(Isa isa) noexcept;
/// Compiled and usable on this CPU (including OS support for the register state; for amx also the
/// process's permission to use the tile data, requested from Linux once).
bool isa_supported(Isa isa) noexcept;
std::vector<Isa> compiled_isas();
/// The process-wide choice (computed once; honours TOPOROUTE_SIMD). Error if the override is unknown or
/// unsupported here.
Status default_isa(Isa* out);
/// Validates an explicit request ("" means default_isa()).
Status resolve_isa(const std::string& requested, Isa* out);
/// The level of one call of an op whose fastest level depends on the call's size (the qmix networks: the AMX
/// tiles pay their set-up and bf16 packing per call, which only enough rows repay): as resolve_isa, except that
/// when nothing named a level (requested "" and TOPOROUTE_SIMD unset) and the default is amx, a call of fewer
/// than amx_min_rows rows runs at avx512.
Status resolve_isa_for_rows(const std::string& requested, std::int64_t rows, std::int64_t amx_min_rows, Isa* out);

}  // namespace toporoute
