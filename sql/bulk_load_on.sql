-- Bulk-load mode, switched on by `make db` before the load stages and off again (bulk_load_off.sql)
-- when they end, whether they succeeded or not. ALTER SYSTEM writes postgresql.auto.conf; a reload applies
-- these without a restart. Every setting here trades crash safety for speed:
ALTER SYSTEM SET fsync = off;               -- no flush to disk: an OS crash or power loss can corrupt data
ALTER SYSTEM SET full_page_writes = off;    -- no torn-page protection, unsafe without fsync anyway
ALTER SYSTEM SET synchronous_commit = off;  -- commits return before their WAL is flushed
ALTER SYSTEM SET autovacuum = off;          -- the stages VACUUM ANALYZE what they load themselves
ALTER SYSTEM SET max_wal_size = '32GB';     -- checkpoints by time only during the load
SELECT pg_reload_conf();
