#pragma once
// A minimal unit-test harness for the pieces of the core Python cannot reach directly (the bit toolkit, SIMD
// helpers). TOPOROUTE_TEST(name) registers a test; TOPOROUTE_CHECK(cond) records a failure with its line and
// goes on; main() runs every test and ends with "N passed, M failed", the line CI reads.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace toporoute::test {

struct Case {
  const char* name;
  std::function<void()> run;
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

inline int& failures_of_current() {
  static int n = 0;
  return n;
}

struct Register {
  Register(const char* name, std::function<void()> run) { cases().push_back({name, std::move(run)}); }
};

inline void fail(const char* file, int line, const std::string& what) {
  ++failures_of_current();
  std::printf("  %s:%d: %s\n", file, line, what.c_str());
}

inline int run_all() {
  int passed = 0, failed = 0;
  for (const Case& c : cases()) {
    failures_of_current() = 0;
    c.run();
    if (failures_of_current() == 0) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAILED %s\n", c.name);
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace toporoute::test

#define TOPOROUTE_TEST(name)                                                        \
  static void name();                                                               \
  static const ::toporoute::test::Register register_##name{#name, name};           \
  static void name()

#define TOPOROUTE_CHECK(cond) \
  ((cond) ? (void)0 : ::toporoute::test::fail(__FILE__, __LINE__, "check failed: " #cond))

#define TOPOROUTE_CHECK_EQ(a, b)                                                                            \
  (((a) == (b)) ? (void)0                                                                                   \
                : ::toporoute::test::fail(__FILE__, __LINE__,                                                \
                                          std::string(#a " == " #b ": ") + std::to_string(a) + " != " +     \
                                              std::to_string(b)))
