"""`ingest osm`: the five vector tables (pois, roads, parks, lakes, regions), from the osmx GeoJSON layers or
from OpenStreetMap PBF extracts, row for row as loader 1 built them.

- load.py: the loader (both inputs): plans, per-source transactions, pois numbering, the report;
- rules.py: the rules, declared once as data: the osmx classification (which OSM object becomes a feature of
  which layer) and loader 1's (which feature becomes which rows);
- features.py: one feature -> its binary COPY rows; batches.py: what both readers hand the loader;
- geojson.py: reading GeoJSON layer files in parallel pieces; _lines.cpp (with geojson_wkb.hpp): the native
  encoder of their lines, where it is built;
- native.py: the native modules and the rules handed to them; copy_rows.hpp: loader 1's rows in C++, shared by
  _lines.cpp and pbf/_osmread.cpp;
- pbf/: the PBF path (the inputs' checks, sources, reader plans and processes, the native and the pyosmium
  readers, --export-geojson).
"""
