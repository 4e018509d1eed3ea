"""What the reports of `reproduce verify` (report.py) and `reproduce score` (score_report.py) share: the HTML
page's frame and its one style, and the JUnit document (a testsuite per group, a testcase per question)."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#1f2328}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #d0d7de}h3{margin:1.2em 0 .4em}
.meta{color:#59636e;margin-top:0}table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
.facts th{width:11em}.num{text-align:right;font-variant-numeric:tabular-nums}
details.q{border:1px solid #d0d7de;border-radius:6px;margin:.4em 0;padding:.3em .7em}
details.q>summary{cursor:pointer}details.q[open]>summary{margin-bottom:.4em}
.status{display:inline-block;min-width:5.5em;font-weight:600}.pass{color:#1a7f37}.fail{color:#cf222e}
.skipped{color:#9a6700}code,pre{font:13px ui-monospace,monospace;background:#f6f8fa}
pre{padding:.5em;white-space:pre-wrap;margin:.3em 0}pre.table{white-space:pre;overflow-x:auto}.cmd{user-select:all}
.card{border:1px solid #d0d7de;border-radius:6px;margin:.4em 0;padding:.4em .8em}
.card[data-paper=pass]{border-left:5px solid #1a7f37}
.card[data-outcome=ran][data-paper=fail],.card[data-outcome=empty]{border-left:5px solid #9a6700}
.card[data-outcome=sql_error],.card[data-outcome=timeout],.card[data-outcome=unreadable],
.card[data-outcome=unscorable],.card[data-outcome=no_prediction]{border-left:5px solid #cf222e}
th[onclick]{cursor:pointer}.sides{display:grid;grid-template-columns:1fr 1fr;gap:1em}.filters select{margin-right:1em}
"""


SORTABLE_SCRIPT = """
function sortBy(th){const table=th.closest('table'),body=table.tBodies[0],i=th.cellIndex,up=th.dataset.up!=='1';
for(const h of table.tHead.rows[0].cells)delete h.dataset.up;th.dataset.up=up?'1':'0';
const key=r=>{const t=r.cells[i].textContent,n=parseFloat(t);return isNaN(n)?t:n};
const rows=[...body.rows].sort((a,b)=>{const x=key(a),y=key(b);
return (typeof x===typeof y?(x<y?-1:x>y?1:0):(typeof x==='number'?-1:1))*(up?1:-1)});
for(const r of rows)body.appendChild(r)}"""


def sortable_table(headers: list[str], rows: list[list[object]]) -> str:
    """An HTML table whose columns sort on a click of their header (SORTABLE_SCRIPT); numbers right-aligned."""
    head = "".join(f"<th onclick='sortBy(this)' title='sort'>{html.escape(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(
        f"<td class='num'>{cell}</td>" if isinstance(cell, int | float) else f"<td>{html.escape(str(cell))}</td>"
        for cell in row) + "</tr>" for row in rows)
    return f"<table class='sortable'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_document(title: str, body: str, script: str = "") -> str:
    """A self-contained page: no link, no source outside it."""
    scripts = f"<script>{script}</script>" if script else ""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style>{scripts}</head><body>\n{body}\n</body></html>")


@dataclass
class Case:
    """One question as a JUnit testcase: an outcome (failure, error, skipped) when it did not pass."""

    classname: str
    name: str
    seconds: float
    properties: dict[str, str] = field(default_factory=dict)
    outcome: str | None = None  # failure, error or skipped
    kind: str = ""  # the outcome's type attribute: the status
    message: str = ""
    text: str | None = None


def junit_document(name: str, suites: dict[str, list[Case]]) -> str:
    """<testsuites name=...> with one <testsuite> per group of cases, counting failures, errors and skips."""
    root = ET.Element("testsuites", name=name)
    for suite_name, cases in suites.items():
        counts = {outcome: sum(case.outcome == outcome for case in cases)
                  for outcome in ("failure", "error", "skipped")}
        suite = ET.SubElement(root, "testsuite", name=suite_name, tests=str(len(cases)),
                              failures=str(counts["failure"]), errors=str(counts["error"]),
                              skipped=str(counts["skipped"]), time=f"{sum(case.seconds for case in cases):.3f}")
        for case in cases:
            element = ET.SubElement(suite, "testcase", classname=case.classname, name=case.name,
                                    time=f"{case.seconds:.3f}")
            if case.properties:
                properties = ET.SubElement(element, "properties")
                for key, value in case.properties.items():
                    ET.SubElement(properties, "property", name=key, value=value)
            if case.outcome:
                outcome = ET.SubElement(element, case.outcome, message=case.message, type=case.kind)
                outcome.text = case.text
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
