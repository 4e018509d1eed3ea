"""`ingest osm`: the five vector tables (pois, roads, parks, lakes, regions), from the osmx GeoJSON layers or
from OpenStreetMap PBF extracts, row for row as loader 1 built them.

- load.py: the loader (both inputs): plans, per-source transactions, pois numbering, the report;
- rules.py: the rules, declared once as data: the osmx classification (which OSM object becomes a feature of
  which layer) and loader 1's (which feature becomes which rows);
- features.py: one feature -> its binary COPY rows; batches.py: what both readers hand the loader;
- geojson.py: reading GeoJSON layer files in parallel pieces;
- the PBF path: pbf_checks.py (inputs, before anything starts), pbf_sources.py (sources, report), pbf_plans.py
  (which reader reads what), pbf_readers.py (the reader processes of a direct load), pbf_native.py and
  _osmread.cpp (the native reader), pbf_pyosmium.py (the portable reader), pbf_export.py (--export-geojson).
"""
