-- Our own bookkeeping (the load log that resumable stages read) lives outside `public`, so that `public`
-- holds exactly the reference tables. The tables in it are defined in ingest/schema.py.
CREATE SCHEMA IF NOT EXISTS gsqa;
REVOKE ALL ON SCHEMA gsqa FROM PUBLIC;
