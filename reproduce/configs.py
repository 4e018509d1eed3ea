"""The benchmark's configs and templates, declared once (docs/BENCHMARK-FORMAT.md, Configs and templates).

A config is a group of templates; `all` is every canonical template. The 9 exploratory raster templates
belong to their group but are run only when named with --template. Lookups hand back copies, so callers
cannot change the registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gsqa_core.errors import GsqaError

VECTOR_TYPES = """range+name range:non_spat_filter+name range:direction+name range:towards+name knn+name
knn:non_spat_filter+name knn+name+multihop1 knn+name+multihop2 knn:direction+name knn:towards+name
intersects:area_max+name intersects:length_max+name range+loc range:non_spat_filter+loc range:direction+loc
range:towards+loc knn+loc knn:non_spat_filter+loc knn:direction+loc knn:towards+loc range+angle knn+angle
range+count intersects+count range+distance knn+distance intersects:area_total+area
intersects:length_total+length""".split()
# The GS-QA vector records' integer `id` (question.json) runs in a block of 100 per template, not in template
# order: V<k>'s question n (0-based) has the id VECTOR_ID_BLOCKS[k - 1] + n. The authors' vector runs key
# their predictions on it (docs/BENCHMARK-FORMAT.md, Question ids).
VECTOR_ID_BLOCKS = [800, 500, 2600, 1600, 200, 600, 900, 2700, 2500, 100, 1900, 1700, 2000, 400, 0, 1200, 1800,
                    300, 1100, 1300, 1000, 1400, 2200, 2300, 700, 2400, 2100, 1500]

RASTER_ONLY = """elevation+poi elevation_compare+two_pois elevation_diff+two_pois elevation_threshold+poi
slope+poi aspect+poi ruggedness+poi nearest_high_terrain+poi nearest_low_terrain+poi slope+route
slope+compare_route""".split()
EXTENDED = """range+name+elevation_condition range+loc+elevation_condition range+count+elevation_condition
range+distance+elevation knn+distance+slope intersects_length_max+name+slope
intersects_area_max+name+max_elevation intersects_area_total+area+avg_slope""".split()
RASTER_VECTOR = """elevation_average+name elevation_proximity_zone+name elevation_lowest_n_poi+name
elevation_compare_categories+name slope_condition+name slope_steepest_n_poi+name""".split()
EXPLORATORY = {
    "raster_only": """elevation_max+region elevation_min+region elevation_mean+region elevation_range+region
    elevation+coverage avg_slope+area min_slope+area max_slope+area""".split(),
    "raster_vector": ["elevation_count_threshold+count"],
}


@dataclass(frozen=True)
class Template:
    id: str  # V1..V28, R1..R11, VR1..VR14; an exploratory template has no id and uses its stem
    group: str  # the config it belongs to
    stem: str  # raw file name without .jsonl; for vector the GS-QA `type`
    questions: int  # records per template in a complete release
    canonical: bool = True
    first_raw_id: int | None = None  # vector only: the integer id of question 0 (VECTOR_ID_BLOCKS)

    @property
    def number(self) -> int:
        """k of V<k>: the vector folder T<k>."""
        return int(self.id.lstrip("VR"))


def _build() -> dict[str, list[Template]]:
    groups = {
        "vector": [Template(f"V{k}", "vector", stem, 100, first_raw_id=block)
                   for k, (stem, block) in enumerate(zip(VECTOR_TYPES, VECTOR_ID_BLOCKS, strict=True), 1)],
        "raster_only": [Template(f"R{k}", "raster_only", stem, 20) for k, stem in enumerate(RASTER_ONLY, 1)],
        "extended": [Template(f"VR{k}", "extended", stem, 20) for k, stem in enumerate(EXTENDED, 1)],
        "raster_vector": [
            Template(f"VR{k}", "raster_vector", stem, 20) for k, stem in enumerate(RASTER_VECTOR, len(EXTENDED) + 1)
        ],
    }
    for group, stems in EXPLORATORY.items():
        groups[group] += [Template(stem, group, stem, 20, canonical=False) for stem in stems]
    return groups


_GROUPS = _build()
CONFIG_NAMES = ["raster_only", "raster_vector", "extended", "vector", "all"]
TEMPLATES = [template for templates in _GROUPS.values() for template in templates]


def templates_of(config: str) -> list[Template]:
    """The canonical templates a config runs (`all`: every group)."""
    if config not in CONFIG_NAMES:
        raise GsqaError(f"unknown config {config!r}: choose one of {', '.join(CONFIG_NAMES)}")
    groups = list(_GROUPS) if config == "all" else [config]
    return [t for group in groups for t in _GROUPS[group] if t.canonical]


def template(name: str) -> Template:
    """A template by id (R5, VR1, V13) or stem (slope+poi, elevation_max+region)."""
    for candidate in TEMPLATES:
        if name in (candidate.id, candidate.stem):
            return candidate
    raise GsqaError(
        f"unknown template {name!r}: use an id (V1-V28, R1-R11, VR1-VR14) or a stem such as "
        f"{RASTER_ONLY[0]!r} or {EXPLORATORY['raster_only'][0]!r}"
    )


def select(config: str, names: list[str]) -> list[Template]:
    """The templates of one run: --template names (in any group of the config), else the config's canonical ones."""
    if not names:
        return templates_of(config)
    groups = set(_GROUPS) if config == "all" else {config}
    chosen = [template(name) for name in names]
    for picked in chosen:
        if picked.group not in groups:
            raise GsqaError(f"template {picked.id} belongs to config {picked.group}, not {config}")
    return list(dict.fromkeys(chosen))


def by_group_and_stem(group: str, stem: str) -> Template | None:
    return next((t for t in _GROUPS.get(group, []) if t.stem == stem), None)


def by_stem(stem: str) -> Template | None:
    """The template of a stem in any group (stems are unique across groups)."""
    return next((t for t in TEMPLATES if t.stem == stem), None)


def by_raw_vector_id(raw_id: int) -> tuple[Template, int] | None:
    """The vector template and 0-based question number of a GS-QA integer id, if it is one."""
    for chosen in _GROUPS["vector"]:
        if chosen.first_raw_id <= raw_id < chosen.first_raw_id + chosen.questions:
            return chosen, raw_id - chosen.first_raw_id
    return None


@dataclass(frozen=True)
class QuestionId:
    """One benchmark question: a template and its 0-based number there; `str()` is the canonical
    `<group>/<template>/<n>`."""

    template: Template
    number: int

    def __str__(self) -> str:
        return f"{self.template.group}/{self.template.stem}/{self.number}"


_RUNNER_ID = re.compile(r"^(?P<stem>.+)-(?P<n>\d+)$")
ID_SCHEMES = "<group>/<template>/<n> (e.g. raster_only/slope+poi/3), a GS-QA vector id (0-2799), <stem>-<n>, " \
             "<group>:<stem>:<n>"


def question_id(raw: Any) -> QuestionId:
    """The question an id names, in any of the schemes ids come in (docs/BENCHMARK-FORMAT.md, Question ids): the
    canonical `<group>/<template>/<n>`, a GS-QA vector integer id (2100), the raster runner's `<stem>-<n>`,
    `<group>:<stem>:<n>`. GsqaError, naming the id and the schemes, for anything else or a number past the
    template's questions. The one parser of ids: every command, prediction file and report reads them here."""
    if isinstance(raw, int) and not -10**9 < raw < 10**9:  # str() of thousands of digits would raise
        raise GsqaError("unknown question id: a number past 0-2799 (GS-QA vector ids)")
    text = str(raw).strip()
    if len(text) > 200:  # no id is this long (int() of thousands of digits would raise)
        raise GsqaError(f"unknown question id {text[:40]!r}...: {len(text):,} characters, no id is so long")
    if isinstance(raw, int) and not isinstance(raw, bool) or text.isdigit():
        found = by_raw_vector_id(int(text))
        if found is None:
            raise GsqaError(f"unknown question id {raw!r}: not a GS-QA vector question (0-2799)")
        return QuestionId(*found)
    if text.count(":") >= 2 and "/" not in text:
        group, rest = text.split(":", 1)
        stem, number = rest.rsplit(":", 1)
        return _numbered(by_group_and_stem(group, stem), number, raw)
    if "/" in text:
        group, rest = text.split("/", 1)
        stem, _, number = rest.rpartition("/")
        return _numbered(by_group_and_stem(group, stem), number, raw)
    if match := _RUNNER_ID.match(text):
        chosen = by_stem(match["stem"])
        return _numbered(chosen, str(_within_template(chosen, int(match["n"]))), raw)
    raise GsqaError(f"unknown question id {raw!r}: expected {ID_SCHEMES}")


def _within_template(chosen: Template | None, number: int) -> int:
    """The number of `<stem>-<n>` within its template. The raster text-to-SQL runner numbers each template
    file from 0; the CHESS-PostGIS runner numbers a group's questions across the group folder's template files
    in alphabetical order, exploratory ones included (`elevation+poi-60` is raster_only's elevation+poi 0, after
    aspect+poi, avg_slope+area and elevation+coverage). The two ranges of a stem do not overlap: a number past
    the template's questions is read as the CHESS one."""
    if chosen is None or number < chosen.questions:
        return number
    offset = 0
    for neighbour in sorted(_GROUPS[chosen.group], key=lambda t: t.stem):  # the folder's files, by name
        if neighbour is chosen:
            return number - offset if offset <= number < offset + chosen.questions else number
        offset += neighbour.questions
    return number


def _numbered(chosen: Template | None, number: str, raw: Any) -> QuestionId:
    if chosen is None or not number.isdigit() or int(number) >= chosen.questions:
        raise GsqaError(f"unknown question id {raw!r}: it names no benchmark question")
    return QuestionId(chosen, int(number))
