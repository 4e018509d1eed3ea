"""The statistics of a score: a 95 % interval for a pass rate, and a paired test between two runs.

A template has 20 or 100 questions, so a pass rate alone hides that two runs 8 points apart may not differ.
Wilson's score interval behaves at 0 % and 100 % (the normal approximation's does not). Two runs answer the
same questions, so they are compared question by question: McNemar's exact test looks only at the
questions one run passed and the other failed (b and c) and asks how likely so lopsided a split is when
either run is as likely to win each of them (a two-sided binomial test with p = 1/2).
"""

from __future__ import annotations

import math

Z_95 = 1.959963984540054  # the 97.5th percentile of the standard normal distribution


def wilson(passed: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for passed/total, as fractions; (0, 1) when nothing was scored."""
    if total <= 0:
        return 0.0, 1.0
    rate = passed / total
    centre = rate + z * z / (2 * total)
    spread = z * math.sqrt(rate * (1 - rate) / total + z * z / (4 * total * total))
    scale = 1 + z * z / total
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pairs: questions only the first run passed and
    questions only the second passed. 1.0 when there is no discordant pair."""
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    term, tail = 1, 1  # C(n, 0); C(n, k + 1) = C(n, k) (n - k) / (k + 1), exact in integers
    for k in range(min(only_first, only_second)):
        term = term * (discordant - k) // (k + 1)
        tail += term
    return min(1.0, 2 * tail / 2**discordant)
