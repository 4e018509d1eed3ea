-- Extensions the benchmark SQL needs. Created before any table: the GS-QA2 DEM script creates them after
-- raster2pgsql, which only works when they already exist. PostGIS >= 3.2 is required (ST_DumpSegments).
CREATE EXTENSION IF NOT EXISTS postgis;
CREATE EXTENSION IF NOT EXISTS postgis_raster;
