// The test programs' main: doctest's, plus one rule. A run asked for test cases by name
// (--test-case=..., as CTest runs each case) that matched none fails, instead of passing with
// zero cases: CTest's discovery cuts a test name at ';' (its list separator), and a cut name
// matches nothing. So a case can never silently stop running.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

unsigned matched_cases = 0;  // test cases that passed the filters, from the run's statistics
bool run_ended = false;

// A listener that records how many test cases the filters let through.
struct MatchCounter : doctest::IReporter {
  explicit MatchCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    matched_cases = stats.numTestCasesPassingFilters;
    run_ended = true;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("match_counter", 1, MatchCounter);

bool names_test_cases(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    for (const char* prefix : {"--test-case=", "-tc=", "--dt-test-case=", "--dt-tc="})
      if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases, ...
  if (status == 0 && run_ended && matched_cases == 0 && names_test_cases(argc, argv)) {
    std::fprintf(stderr,
                 "no test case matches the --test-case filter; a test name containing ';' is cut there by "
                 "CTest's discovery (write ',' instead)\n");
    return 1;
  }
  return status;
}
