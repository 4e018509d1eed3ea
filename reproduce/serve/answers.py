"""An answer's shape against what its question expects (submit_answer refuses one that does not fit, before it
ends the episode): each row names every component of the template (tolerances.COMPONENTS) by a column the judge
looks up first (an accepted name, exactly or inside a column name), with a value of the kind the component's
metric reads (a set of names, judged as one bag, needs a name in one row at least). A bare value, or a list of
them, is the first component's, as the judge takes it. Stricter than the judge on three points: the judge also
takes a row's only value for a component its name does not name (`[{"height_ft": 800}]` judged as metres), an
infinite number ("Infinity", 1e999), and any text as a name; an agent has been told the names, so such a row is
refused, and so are a number that is not finite and a name with no letter or digit or longer than any name
OpenStreetMap holds (MAX_NAME_CHARACTERS)."""

from __future__ import annotations

import json
import math
from typing import Any

from reproduce.judging import tolerances
from reproduce.judging.values import as_number, point_of
from reproduce.refusals import Refusal, refused
from reproduce.serve.prompts import expected_answer

YES_NO_WORDS = ("yes", "no")
MAX_NAME_CHARACTERS = 255  # OpenStreetMap's limit on a tag's value: no name in the reference tables is longer


def _is_name(value: Any) -> bool:
    """Text with a letter or digit, at most MAX_NAME_CHARACTERS, or a number (a road named 101): the judge reads
    a name's words."""
    if isinstance(value, str):
        return len(value) <= MAX_NAME_CHARACTERS and any(character.isalnum() for character in value)
    return _is_number(value)


def _is_yes_no(value: Any) -> bool:
    return isinstance(value, str) and " ".join(value.lower().split()) in YES_NO_WORDS


def _is_number(value: Any) -> bool:
    """A finite number, or text of one (the judge reads "12.5" too)."""
    number = as_number(value)
    return number is not None and math.isfinite(number)


def _is_geometry(value: Any) -> bool:
    return point_of(value) is not None  # what the judge measures a location by


# What each metric reads, by its name (any metric not named here reads a number): (test, what it is called).
KINDS = {tolerances.NAME.name: (_is_name, f"a name (text with a letter or digit, at most {MAX_NAME_CHARACTERS} "
                                          "characters)"),
         tolerances.LOCATION.name: (_is_geometry, "a geometry as WKT (not empty, finite coordinates)"),
         tolerances.YES_NO.name: (_is_yes_no, '"yes" or "no"')}
NUMBER = (_is_number, "a finite number")


def misfit(template_id: str, rows: list[dict[str, Any]]) -> Refusal | str:
    """Why rows (answer_rows' result: a bare value is a row of the first component) do not fit the template's
    components: the refusal, one line naming what is expected; "" when they fit. No rows fit: an answer that
    nothing matches is the agent's to give."""
    for component in tolerances.components_of(template_id):
        wrong = [why for number, row in enumerate(rows, start=1)
                 if (why := _component_misfit(component, row, "the answer" if len(rows) == 1 else f"row {number}"))]
        if wrong and (not component.joined or len(wrong) == len(rows)):
            return refused("answer_shape", why=wrong[0], expected=expected_answer(template_id)["format"])
    return ""


def _component_misfit(component: tolerances.Component, row: dict[str, Any], where: str) -> str:
    column = _named(row, component.keys)
    if column is None:
        columns = ", ".join(map(str, row)) or "none"
        return f"{where} has no column {_names(component)}; its columns: {_shorten(columns)}"
    test, kind = KINDS.get(component.metric.name, NUMBER)
    if not test(row[column]):
        return f"{where}'s {column} is {_shorten(json.dumps(row[column], default=str))}, not {kind}"
    return ""


def _named(row: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The column the judge reads for the component before any fallback (values.lookup's first two steps)."""
    for key in keys:
        if key in row:
            return key
    # a column name that is not text (a Python caller's) is no name of the judge's
    return next((column for key in keys for column in row if isinstance(column, str) and key in column), None)


def _names(component: tolerances.Component) -> str:
    others = [key for key in component.keys if key != component.label]
    return " or ".join([component.label, *others])


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…"
