"""The interval and the paired test of `reproduce score`, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from reproduce.stats import mcnemar_exact, wilson


def test_wilson_interval_of_8_of_10() -> None:
    # centre (0.8 + 1.92/10) / 1.384, half-width 1.96 * sqrt(0.016 + 0.0096)/1.384
    low, high = wilson(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)


@pytest.mark.parametrize("passed, total, expected", [(0, 20, (0.0, 0.1611)), (20, 20, (0.8389, 1.0)),
                                                     (0, 0, (0.0, 1.0))])
def test_wilson_interval_at_the_ends(passed: int, total: int, expected: tuple[float, float]) -> None:
    assert tuple(round(bound, 4) for bound in wilson(passed, total)) == expected


def test_mcnemar_exact_is_the_two_sided_binomial_tail() -> None:
    # 12 + 4 discordant questions: 2 * (C(16,0) + ... + C(16,4)) / 2^16 = 2 * 2517 / 65536
    assert math.isclose(mcnemar_exact(12, 4), 2 * 2517 / 65536)
    assert mcnemar_exact(4, 12) == mcnemar_exact(12, 4)


@pytest.mark.parametrize("first, second, expected", [(0, 0, 1.0), (3, 3, 1.0), (5, 0, 2 / 32)])
def test_mcnemar_exact_edges(first: int, second: int, expected: float) -> None:
    assert mcnemar_exact(first, second) == expected
