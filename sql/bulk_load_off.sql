-- Leave bulk-load mode (see bulk_load_on.sql): back to the durable settings, then a CHECKPOINT so that
-- everything written with fsync off is on disk before the database is declared ready.
ALTER SYSTEM RESET fsync;
ALTER SYSTEM RESET full_page_writes;
ALTER SYSTEM RESET synchronous_commit;
ALTER SYSTEM RESET autovacuum;
ALTER SYSTEM RESET max_wal_size;
SELECT pg_reload_conf();
CHECKPOINT;
