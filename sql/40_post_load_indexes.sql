-- Run after the vector tables are loaded (`ingest finalize`): building GiST indexes after a bulk load is
-- far cheaper than maintaining them row by row. Names follow GS-QA2's loader 2; they change plans, not
-- results. The DEM index (dem_us_st_convexhull_idx) belongs to the DEM stage, like raster2pgsql -I.
CREATE INDEX IF NOT EXISTS pois_geometry_gix ON public.pois USING GIST (geometry);
CREATE INDEX IF NOT EXISTS roads_geometry_gix ON public.roads USING GIST (geometry);
CREATE INDEX IF NOT EXISTS parks_geometry_gix ON public.parks USING GIST (geometry);
CREATE INDEX IF NOT EXISTS lakes_geometry_gix ON public.lakes USING GIST (geometry);
CREATE INDEX IF NOT EXISTS regions_geometry_gix ON public.regions USING GIST (geometry);
ANALYZE public.pois, public.roads, public.parks, public.lakes, public.regions;
