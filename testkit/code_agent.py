"""A scripted code-writing agent for the demo's two templates: for each question, the Python a code agent
would write over an `ingest export` folder (geopandas over pois.parquet for V5, the nearest museum to a hotel;
rasterio sampling the VRT for R1, the elevation at a museum), which prints its answer as JSON. The same
program runs in the sandbox (`run_python`, the export at /data) and in this process over a local folder."""

from __future__ import annotations

import contextlib
import io
import json
import re

HEAD = """import json, warnings
import geopandas
warnings.simplefilter("ignore")  # geopandas computes on the plane; the distances below are geodesic
pois = geopandas.read_parquet({data!r} + "/vector/pois.parquet")
"""
PROGRAMS = {
    r"What is the elevation at (.+)\?": """import rasterio
point = pois.loc[pois.poi_name == {name!r}, "geometry"].iloc[0]
with rasterio.open({data!r} + "/dem/dem_us.vrt") as dem:
    [value] = next(dem.sample([(point.x, point.y)]))
print(json.dumps([{{"elevation": float(value)}}]))
""",
    r"What's the closest museum nearby (.+)\?": """from pyproj import Geod
hotel = pois.loc[pois.poi_name == {name!r}, "geometry"].iloc[0]
museums = pois[pois.tourism == "museum"]
_, _, metres = Geod(ellps="WGS84").inv([hotel.x] * len(museums), [hotel.y] * len(museums), museums.geometry.x,
                                       museums.geometry.y)
nearest = museums.iloc[int(metres.argmin())]
print(json.dumps([{{"id": int(nearest.id), "geometry": nearest.geometry.wkt, "poi_name": nearest.poi_name,
                   "osm_id": int(nearest.osm_id), "tourism": nearest.tourism}}]))
""",
}


def program(question: str, data: str = "/data") -> str:
    """The Python that answers `question` from the export at `data`, printing the answer as JSON."""
    for pattern, body in PROGRAMS.items():
        if place := re.fullmatch(pattern, question):
            return HEAD.format(data=data) + body.format(name=place[1], data=data)
    raise ValueError(f"not a demo question: {question}")


def answer_here(question: str, data: str) -> list[dict]:
    """The program run in this process (our own code, over a local folder): its printed answer."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(program(question, data), {})  # noqa: S102 - the scripted agent's own program, not a model's
    return json.loads(printed.getvalue())
