"""How the suite's minutes-long tests are dealt to pytest-xdist workers (tests/_shared_vllm.py): spread over the
workers by their recorded seconds, so that no worker runs them all one after another."""

from __future__ import annotations

from _shared_vllm import SLOW_TESTS, deal_slow_tests


def test_slow_tests_are_dealt_longest_first_to_the_least_loaded_worker() -> None:
    nodeids = ["tests/a.py::quick", *SLOW_TESTS, "tests/b.py::quick"]
    dealt = deal_slow_tests(nodeids, 2)
    assert sorted(i for indices in dealt for i in indices) == list(range(1, len(SLOW_TESTS) + 1))
    loads = [sum(SLOW_TESTS[nodeids[i]] for i in indices) for indices in dealt]
    # each worker gets about half: greedy dealing, longest first, leaves them at most one test's time apart
    assert abs(loads[0] - loads[1]) <= max(SLOW_TESTS.values())
    for indices in dealt:  # each worker's share runs longest first
        seconds = [SLOW_TESTS[nodeids[i]] for i in indices]
        assert seconds == sorted(seconds, reverse=True)


def test_only_collected_slow_tests_are_dealt() -> None:
    longest = max(SLOW_TESTS, key=SLOW_TESTS.__getitem__)
    assert deal_slow_tests(["tests/a.py::quick", longest], 2) == [[1], []]
    assert deal_slow_tests(["tests/a.py::quick"], 2) == [[], []]
    assert deal_slow_tests([longest, "tests/a.py::quick"], 1) == [[0]]
