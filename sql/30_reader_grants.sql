-- What gsqa_reader may do in this database: read the reference tables and what PostGIS functions read
-- (spatial_ref_sys, raster_columns, ...), nothing else. Re-applied by every `ingest init`; idempotent.
GRANT USAGE ON SCHEMA public TO gsqa_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO gsqa_reader;
-- Tables that later stages create (or re-create with --replace) come out readable without another init.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO gsqa_reader;
-- No CREATE anywhere, no temporary tables. TEMP is granted to PUBLIC by default, so it is revoked there;
-- the owner and superusers keep it.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA gsqa FROM gsqa_reader;
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO gsqa_reader', current_database());
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM gsqa_reader', current_database());
END
$$;

-- One question must not end or cancel another: a role may signal the backends of its own role, so nobody
-- but superusers may call the signalling functions in this database. (`reproduce` cancels through the
-- protocol's cancel request, and ends a runaway backend through its admin connection.)
REVOKE EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer, bigint) FROM PUBLIC;
