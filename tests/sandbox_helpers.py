"""What the sandbox tests share: what a session of a sandbox role gets, and a fingerprint of everything SQL
could leave behind in a cluster, to compare before and after hostile SQL."""

from __future__ import annotations

import time
from typing import Any

import psycopg

# What a sandbox role's session reports (current_setting), as `reproduce check` shows it.
SESSION_SETTINGS = {"default_transaction_read_only": "on", "statement_timeout": "2min",
                    "idle_in_transaction_session_timeout": "10min", "work_mem": "64MB", "temp_file_limit": "2GB",
                    "search_path": "public", "extra_float_digits": "1",
                    "standard_conforming_strings": "on", "client_encoding": "UTF8",
                    "client_connection_check_interval": "2s"}
MODEL_SESSION_SETTINGS = {**SESSION_SETTINGS, "max_parallel_workers_per_gather": "0"}  # the model role's own too


def session_settings(role: str) -> dict[str, str]:
    return MODEL_SESSION_SETTINGS if role == "gsqa_model" else SESSION_SETTINGS


SANDBOX_BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE usename LIKE 'gsqa%'"
BACKEND_EXIT_S = 10.0


def leftovers(admin: str) -> dict[str, Any]:
    """Everything a session could leave behind that outlives it, as the administrator sees it: roles (settings,
    password verifier, attributes, memberships), what roles own anywhere (large objects, default privileges),
    catalog comments, prepared transactions, advisory locks, sandbox backends, relations and row counts. A
    backend ends a moment after its client closes: up to BACKEND_EXIT_S is given for that."""
    with psycopg.connect(admin, autocommit=True) as conn:
        deadline = time.monotonic() + BACKEND_EXIT_S
        while conn.execute(SANDBOX_BACKENDS).fetchone()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        queries = {
            "roles": "SELECT rolname, rolpassword, rolconnlimit, rolsuper, rolinherit, rolcreatedb, rolcreaterole "
                     "FROM pg_authid WHERE rolname LIKE 'gsqa%' ORDER BY 1",
            "role settings": "SELECT setdatabase, setrole::regrole::text, setconfig FROM pg_db_role_setting "
                             "ORDER BY 1, 2",
            "memberships": "SELECT roleid::regrole::text, member::regrole::text FROM pg_auth_members ORDER BY 1, 2",
            "owned": "SELECT dbid, classid::regclass::text, objid, refobjid::regrole::text FROM pg_shdepend "
                     "WHERE deptype = 'o' AND refobjid::regrole::text LIKE 'gsqa%' ORDER BY 1, 2, 3",
            "large objects": "SELECT count(*) FROM pg_largeobject_metadata",
            "default privileges": "SELECT count(*) FROM pg_default_acl",
            "comments": "SELECT count(*) FROM pg_description",
            "shared comments": "SELECT count(*) FROM pg_shdescription",
            "prepared transactions": "SELECT count(*) FROM pg_prepared_xacts",
            "advisory locks": "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
            "sandbox backends": SANDBOX_BACKENDS,
            "relations": "SELECT count(*) FROM pg_class",
            "namespaces": "SELECT nspname FROM pg_namespace ORDER BY 1",
            "pois": "SELECT count(*), max(id) FROM pois",
            "sequence": "SELECT last_value FROM pois_id_seq",
        }
        return {name: conn.execute(query).fetchall() for name, query in queries.items()}
