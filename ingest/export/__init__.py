"""`ingest export`: the reference database as the files a code-writing agent reads, holding exactly what the
tables hold, and `ingest export --check`, which proves a folder equals its database.

    DIR/export.json            the manifest (manifest.py): the database it came from, every file with its size,
                               sha256 and row or pixel counts, the formats' versions; written last
    DIR/vector/<table>.parquet one GeoParquet 1.1 file per vector table (vector.py)
    DIR/dem/<source file>.tif  one Cloud-Optimized GeoTIFF per DEM source file, from its tiles (dem.py)
    DIR/dem/dem_us.vrt         one VRT mosaic over them
    DIR/geojson/, DIR/flatgeobuf/  with --format geojson, flatgeobuf: the vector tables in those formats
    DIR/.export/               the run's journal: the files finished so far, for a rerun (run.py)

One module per concern: vector.py (tables into GeoParquet, the row checksum), geojson.py and flatgeobuf.py (the
other vector formats), dem.py (tiles into COGs, the VRT, the pixel checksum), manifest.py (the manifest, the
database's identity), run.py (the stage: preflight, resume, progress), verify.py (`--check`).
"""
