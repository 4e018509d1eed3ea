-- Settings of the read-only login role that `reproduce` runs benchmark SQL as. Applied only when
-- `ingest init` has just created the role: roles are cluster-wide, so an existing one is left alone.
-- It is a LOGIN role rather than a SET ROLE target because SET ROLE can be undone by the SQL it runs.
ALTER ROLE gsqa_reader NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT;
-- Any role may change its own statement_timeout; `reproduce` re-applies it for every question.
ALTER ROLE gsqa_reader SET statement_timeout = '120s';
ALTER ROLE gsqa_reader SET default_transaction_read_only = on;
ALTER ROLE gsqa_reader SET idle_in_transaction_session_timeout = '10min';
