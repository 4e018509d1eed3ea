-- Run after the vector tables are loaded (`ingest finalize`): building GiST indexes after a bulk load is
-- far cheaper than maintaining them row by row. Names follow GS-QA2's loader 2; they change plans, not
-- results. The DEM index (dem_us_st_convexhull_idx) belongs to the DEM stage, like raster2pgsql -I.
-- One line per table, largest first: the lines run at once on as many connections as the machine has cores
-- (each builds one index and analyzes its table; ANALYZE of geography columns is about as slow as the index).
CREATE INDEX IF NOT EXISTS roads_geometry_gix ON public.roads USING GIST (geometry); ANALYZE public.roads;
CREATE INDEX IF NOT EXISTS lakes_geometry_gix ON public.lakes USING GIST (geometry); ANALYZE public.lakes;
CREATE INDEX IF NOT EXISTS parks_geometry_gix ON public.parks USING GIST (geometry); ANALYZE public.parks;
CREATE INDEX IF NOT EXISTS pois_geometry_gix ON public.pois USING GIST (geometry); ANALYZE public.pois;
CREATE INDEX IF NOT EXISTS regions_geometry_gix ON public.regions USING GIST (geometry); ANALYZE public.regions;
