"""The order of a run's questions: longest first, so that no slow question starts last.

With N workers the run ends when its last question does; a two-minute question taken last keeps the run
going two minutes after the others are done (the makespan). Taking the longest first is the classic
remedy (LPT scheduling: at most 4/3 of the best order). How long a question takes comes from an earlier
run when there is one (--baseline's report or the --resume file): its own time, else the median of its
template's, else the median of all. With no earlier run, the estimate is the size of what its SQL reads:
the planner's row counts of the reference tables it names, a crude proxy that puts the 18 M roads and the
266 k DEM tiles ahead of the small tables.

What it gains, by list scheduling (each question to the first free worker) of 3,300 synthetic durations
(`bench/reproduce_bench.py --replicas`: `synthetic_durations`, 33 templates of 100 questions, 21 light with a median
of 0.3 s, 8 medium of 5 s, 4 heavy of 60 s, lognormal within a template, capped at the 120 s timeout, 33,266 s
in all; `--durations run.json` takes a recorded run instead):

    servers x workers   file order   heavy templates last   longest first   lower bound (total / workers)
    1 x 2               16,633 s     16,661 s               16,633 s        16,633 s
    2 x 2                8,345 s      8,364 s                8,317 s         8,317 s
    1 x 8                4,220 s      4,211 s                4,158 s         4,158 s
    2 x 8                2,146 s      2,138 s                2,079 s         2,079 s
    4 x 8                1,102 s      1,098 s                1,040 s         1,040 s

The wall is the total work over the workers until the longest single question matters: 4 servers of 8 workers
(one per core) take about 17 min where one 2-core server takes 4.6 h. Longest first reaches the lower bound;
file order ends up to about 60 s late (the last heavy question starting just before the others finish), and
the more workers, the more that matters: once a question's 120 s is no longer small against total / workers,
file order can leave all but one worker idle at the end.

The workers of several servers (`--replica`) take from one queue. On one 2-core machine a primary and its hot
standby run sleep-bound questions (`pg_sleep(0.25)`, standing for questions that wait on their own server's
disk or cores) 1.87x as fast as the primary alone and CPU-bound ones no faster, both servers sharing the cores
(`bench/reproduce_bench.py --replicas`); on separate servers CPU-bound questions behave like the sleep-bound ones.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path

from gsqa_core.errors import GsqaError
from reproduce import configs
from reproduce.dataset import Record, tables_needed


def earlier_durations(path: Path) -> dict[str, float]:
    """id -> seconds from a `reproduce verify` --json-out report or --resume file (entries without a time,
    as in a hand-made baseline, are left out)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        if text.lstrip().startswith('{"format"'):  # a resume file: a header line, then one result a line
            entries = [json.loads(line) for line in text.splitlines()[1:] if line.strip()]
        else:
            entries = json.loads(text)["results"]
        return {entry["id"]: float(entry["seconds"]) for entry in entries
                if entry.get("outcome", entry.get("status")) != "skipped" and entry.get("seconds") is not None}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"{path}: not a report or resume file of `reproduce verify` ({error})") from None


def longest_first(records: list[Record], durations: Mapping[str, float],
                  table_rows: Mapping[str, int | None]) -> list[Record]:
    """`records` ordered by their estimated seconds, longest first (dataset order among equals)."""
    return sorted(records, key=estimator(durations, table_rows), reverse=True)


def estimator(durations: Mapping[str, float], table_rows: Mapping[str, int | None]) -> Callable[[Record], float]:
    """record -> its estimated cost (seconds, or rows read when no earlier run is known)."""
    if not durations:
        return lambda record: sum(table_rows.get(name) or 0 for name in tables_needed([record]))
    by_template: dict[str, list[float]] = defaultdict(list)
    for record_id, seconds in durations.items():
        try:
            by_template[configs.question_id(record_id).template.id].append(seconds)
        except GsqaError:
            continue  # an id of another dataset: no template to learn from
    medians = {template: statistics.median(found) for template, found in by_template.items()}
    overall = statistics.median(durations.values())
    return lambda record: durations.get(record.id, medians.get(record.template_id, overall))
