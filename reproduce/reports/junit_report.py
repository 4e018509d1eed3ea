"""--junit: one testsuite per run, one testcase per question (classname config.template); a question that does
not pass the headline verdict is a failure, its SQL's timeout or error an error, a question not in the data
skipped; both verdicts and their reasons are the testcase's properties. CI systems show failures and skips."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from reproduce.reports.model import Report, by_run, evidence
from reproduce.results import Result

KINDS = {"timeout": "error", "sql_error": "error", "skipped": "skipped"}  # word -> element; "pass" none, else failure
PROPERTIES = ("outcome", "paper", "paper_reason", "strict", "strict_reason")
MESSAGE_CHARACTERS = 500


def render(report: Report) -> str:
    """<testsuites name=COMMAND> with a <testsuite> per run, counting failures, errors and skips."""
    root = ET.Element("testsuites", name=report.view.command)
    for name, results in by_run(report.results).items():
        kinds = [_kind(report.word(result)) for result in results]
        suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(results)),
                              failures=str(kinds.count("failure")), errors=str(kinds.count("error")),
                              skipped=str(kinds.count("skipped")), time=f"{sum(r.seconds for r in results):.3f}")
        for result, kind in zip(results, kinds, strict=True):
            _case(suite, report, result, kind)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _kind(word: str) -> str | None:
    return None if word == "pass" else KINDS.get(word, "failure")


def _case(suite: ET.Element, report: Report, result: Result, kind: str | None) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"{result.group}.{result.template_id}", name=result.id,
                         time=f"{result.seconds:.3f}")
    properties = ET.SubElement(case, "properties")
    for key in PROPERTIES:
        ET.SubElement(properties, "property", name=key, value=str(getattr(result, key)))
    if kind:
        word = report.word(result)
        outcome = ET.SubElement(case, kind, message=f"{word}: {evidence(result, report.verdict)}"[:MESSAGE_CHARACTERS],
                                type=word)
        outcome.text = json.dumps(result.detail, indent=1, default=str)
