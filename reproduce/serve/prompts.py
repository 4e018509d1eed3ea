"""What an agent of `reproduce serve` is told: the instructions for the tools served (the MCP prompt and the
server's instructions), the answer a question expects (from the tolerance table, never its values), and a
terrain question's places as the authors' code-agent baseline gave them."""

from __future__ import annotations

import json
from typing import Any

from reproduce.dataset import Record
from reproduce.judging import tolerances

AGENT_INSTRUCTIONS = {
    "intro": """You answer geospatial questions of the GS-QA2 benchmark with its reference data (OpenStreetMap
layers and a DEM raster) through these tools: question(question_id) gives the question and the answer it
expects; schema() describes the tables;""",
    "sql": """query(question_id, sql) runs one read-only SELECT on the reference database (PostgreSQL 15 with
PostGIS; rows come back as JSON, geometries as WKT);""",
    "python": """run_python(question_id, code) runs a Python program (geopandas, shapely, pyproj, rasterio,
pyarrow, numpy, scipy) in a sandbox without network, with the data as files at /data: /data/vector/LAYER.parquet
(GeoParquet of the tables pois, roads, parks, lakes, regions: the same columns, geometries in EPSG:4326) and
/data/dem/dem_us.vrt (the DEM as one raster over the Cloud-Optimized GeoTIFFs beside it, metres); print what you
need (stdout and stderr come back, long output cut in the middle); /tmp/work keeps your files for the question;
for a terrain question, question() also gives its places as WKT;""",
    "end": """submit_answer(question_id, answer) records your answer, once, and ends the question. Answer with a
JSON list of rows whose keys are the expected columns, or with one value where one is expected. Every call on a
question counts against its budget.""",
}


def agent_instructions(served: frozenset[str]) -> str:
    """What an agent is told of the tools served (the MCP prompt's first part)."""
    return "\n".join(AGENT_INSTRUCTIONS[part] for part in ("intro", "sql", "python", "end")
                     if part in ("intro", "end") or part in served)


def entities(record: Record) -> list[dict[str, str]]:
    """A terrain question's places as the authors' code-agent baseline gave them: name and geometry as WKT
    (from the record's question_entities; never anything of the answer)."""
    if record.group == "vector":
        return []
    return [{"name": str(entity.get("display_name") or key), "wkt": entity["geo_wkt"]}
            for key, entity in record.question_entities.items()
            if isinstance(entity, dict) and isinstance(entity.get("geo_wkt"), str)]


def expected_answer(template_id: str) -> dict[str, Any]:
    """What a template's answer looks like, from the tolerance table (tolerances.COMPONENTS): never its values."""
    components = tolerances.components_of(template_id)
    described = [{"column": component.label, "also_accepted": list(component.keys[1:]),
                  "value": component.metric.expects, "judged_by": _judged_by(component.metric),
                  **({"rows": "one row per feature: every one named"} if component.joined else {})}
                 for component in components]
    example = {component.label: f"<{component.metric.expects.split(',')[0]}>" for component in components}
    return {"components": described,
            "format": f"a JSON list of rows such as [{json.dumps(example)}]"
                      + ("; a single value is taken as the first column" if len(components) == 1 else "")}


def _judged_by(metric: tolerances.Metric) -> str:
    if metric.higher_is_better:
        return f"{metric.name} >= {metric.threshold:g}"
    unit = metric.name.split("(")[-1].rstrip(")") if "(" in metric.name else ""
    if metric is tolerances.RELATIVE:
        return f"within {metric.threshold:.0%} of the answer"
    if metric is tolerances.YES_NO:
        return "the same word"
    return f"within {metric.threshold:g} {unit} of the answer"
