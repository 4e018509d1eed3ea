"""The PBF path of `ingest osm`: osmx's layers read from OpenStreetMap `.osm.pbf` extracts.

- checks.py: the inputs, before anything starts; sources.py: the sources and the readers' report;
- plans.py: which reader process reads what; readers.py: the reader processes of a direct load;
- native.py with _osmread.cpp: the native reader (libosmium, built at install, hatch_build.py);
- pyosmium.py: the portable reader; export.py: --export-geojson.
"""
