#include "toporoute/dispatch.hpp"

#include <cstdint>
#include <cstdlib>
#include <utility>

#if defined(TOPOROUTE_HAVE_AMX)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace toporoute {

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::amx: return "amx";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::generic: break;
  }
  return "generic";
}

bool parse_isa(const std::string& name, Isa* out) noexcept {
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (name == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool isa_compiled(Isa isa) noexcept {
#if defined(TOPOROUTE_HAVE_X86_SIMD)
#if defined(TOPOROUTE_HAVE_AMX)
  (void)isa;
  return true;
#else
  return isa != Isa::amx;
#endif
#else
  return isa == Isa::generic;
#endif
}

#if defined(TOPOROUTE_HAVE_AMX)
namespace {

// CPUID.(7,0):EDX AMX-BF16 (bit 22) and AMX-TILE (bit 24); XCR0 with the tile state (bits 17, 18) enabled by
// the OS; then Linux's per-process permission for the tile data (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
// without which the first tile instruction faults. Asked once per process; the answer never changes.
bool amx_usable() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 22)) == 0 || (d & (1u << 24)) == 0) return false;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // OSXSAVE
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace
#endif

bool isa_supported(Isa isa) noexcept {
  if (!isa_compiled(isa)) return false;
#if defined(TOPOROUTE_HAVE_X86_SIMD)
  // __builtin_cpu_supports also checks that the OS saves the wider register state (XCR0).
  switch (isa) {
    case Isa::generic: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
    case Isa::amx: {
#if defined(TOPOROUTE_HAVE_AMX)
      static const bool usable = isa_supported(Isa::avx512) && __builtin_cpu_supports("avx512bw") && amx_usable();
      return usable;
#else
      return false;
#endif
    }
  }
#endif
  return isa == Isa::generic;
}

std::vector<Isa> compiled_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (isa_compiled(isa)) out.push_back(isa);
  }
  return out;
}

namespace {

std::string supported_list() {
  std::string s;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (isa_supported(isa)) s += (s.empty() ? "" : ", ") + std::string(isa_name(isa));
  }
  return s;
}

Status check_request(const std::string& requested, const char* arg, Isa* out) {
  Isa isa;
  if (!parse_isa(requested, &isa)) {
    return Status::error(StatusCode::invalid_argument, arg,
                         std::string(arg) + " must be one of generic, avx2, avx512, amx; got '" + requested + "'");
  }
  if (!isa_supported(isa)) {
    return Status::error(StatusCode::unsupported, arg,
                         std::string(arg) + "=" + requested + " is not available here (" +
                             (isa_compiled(isa) ? "this CPU lacks it" : "not compiled into this build") +
                             "); supported: " + supported_list());
  }
  *out = isa;
  return Status::success();
}

struct DefaultChoice {
  Status status;
  Isa isa;
  bool named;  // by TOPOROUTE_SIMD: every call runs at it, whatever its size
};

DefaultChoice choose_default() {
  const char* env = std::getenv("TOPOROUTE_SIMD");
  Isa isa = Isa::generic;
  if (env != nullptr && env[0] != '\0') {
    Status s = check_request(env, "TOPOROUTE_SIMD", &isa);
    return {s, isa, true};
  }
  for (Isa cand : {Isa::amx, Isa::avx512, Isa::avx2}) {
    if (isa_supported(cand)) return {Status::success(), cand, false};
  }
  return {Status::success(), Isa::generic, false};
}

const DefaultChoice& default_choice() {
  static const DefaultChoice choice = choose_default();  // once per process; immutable afterwards
  return choice;
}

}  // namespace

Status default_isa(Isa* out) {
  const DefaultChoice& choice = default_choice();
  *out = choice.isa;
  return choice.status;
}

Status resolve_isa(const std::string& requested, Isa* out) {
  if (requested.empty()) return default_isa(out);
  return check_request(requested, "isa", out);
}

Status resolve_isa_for_rows(const std::string& requested, std::int64_t rows, std::int64_t amx_min_rows, Isa* out) {
  if (!requested.empty()) return check_request(requested, "isa", out);
  const DefaultChoice& choice = default_choice();
  *out = choice.isa;
  if (choice.status.ok() && choice.isa == Isa::amx && !choice.named && rows < amx_min_rows) *out = Isa::avx512;
  return choice.status;
}

}  // namespace toporoute
