"""Judging a question's rows against its stored answer: the one judge (judge.py) over the tolerances
(tolerances.py), the values they read (values.py), the strict verdict and row diff (strict.py), the paper's
scoring (paper.py), and the known reasons an answer may legitimately differ (instability.py)."""
