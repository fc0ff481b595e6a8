"""How the suite's minutes-long tests are dealt to pytest-xdist workers (tests/_shared_vllm.py): spread over the
workers by their recorded seconds, so that no worker runs them all one after another, after the long tests that
need no model on the workers that would otherwise wait for the first one's model conversion."""

from __future__ import annotations

from _shared_vllm import LEAD_TESTS, SLOW_TESTS, deal_slow_tests


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


def test_tests_without_a_model_lead_on_the_workers_after_the_first() -> None:
    nodeids = ["tests/a.py::quick", *SLOW_TESTS, *LEAD_TESTS]
    lead = [nodeids.index(n) for n in LEAD_TESTS]
    dealt = deal_slow_tests(nodeids, 2)
    assert dealt[1][: len(lead)] == lead and not set(lead) & set(dealt[0])
    assert sorted(i for indices in dealt for i in indices) == list(range(1, len(nodeids)))
    # the slow tests still balance, the lead tests counted in the second worker's load
    loads = [sum({**SLOW_TESTS, **LEAD_TESTS}[nodeids[i]] for i in indices) for indices in dealt]
    assert abs(loads[0] - loads[1]) <= max(SLOW_TESTS.values())
    three = deal_slow_tests(nodeids, 3)
    assert [three[1][0], three[2][0]] == lead and not set(lead) & set(three[0])
    # one worker: nothing to wait for, the lead tests go with the rest
    assert not set(lead) & set(deal_slow_tests(nodeids, 1)[0])
