-- Resource limits of the read-only login role, applied by every `ingest init` (role settings take effect
-- at the next login). Benchmark SQL is untrusted: a bad join on the 18 M-row roads table must not fill the
-- server's disk with temporary files within its 120 s, and each sort or hash node gets the server's work_mem.
-- A question past the limit fails with "temporary file size exceeds temp_file_limit" (status error).
ALTER ROLE gsqa_reader SET temp_file_limit = '2GB';
ALTER ROLE gsqa_reader SET work_mem = '64MB';
