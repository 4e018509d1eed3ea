"""The DEM loader (`ingest dem`): ASTER GDEM GeoTIFFs into public.dem_us as raster2pgsql would load them.

load.py plans and writes (one transaction per file, heap in rid order, the finish of -I -C -M); stagers.py
are the processes that read, encode and stage the files ahead of it; tiles.py reads a GeoTIFF and cuts it
into raster WKB tiles (no database); constraints.py writes the raster constraints of -C without scanning
the table; synthetic.py makes ASTER-shaped GeoTIFFs for the demo, tests and benchmarks.
"""
