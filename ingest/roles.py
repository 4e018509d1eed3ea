"""`ingest init`'s part of the sandbox (gsqa_core/sandbox.py): the two login roles created, or repaired where
they differ from the declaration, their passwords, and their privileges in this database, all in the caller's
transaction. Returns what it changed in a role that was there before, so that init can say so, and what still
differs (init cannot repair it); a second run changes nothing.

A role may always change its own stored settings, its password and its default privileges (PostgreSQL 15):
those are what a repair usually restores. What a role owns in another database of the cluster is named, not
dropped: that database is not ours.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import stringprep
import unicodedata

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from gsqa_core import sandbox, schema
from gsqa_core.db import identifier
from gsqa_core.roles import (
    TABLE_WRITES,
    differences,
    owned_elsewhere,
    privilege_differences,
    role_attributes,
    role_differences,
    server_differences,
    stored_settings,
    writable,
)
from gsqa_core.sandbox import Role

OTHER_DATABASE_TIMEOUT = 5  # seconds to connect to another database of the server for a kept password


def apply(conn: psycopg.Connection, dsn: str, database_was_ours: bool) -> tuple[list[str], list[str]]:
    """Create or repair both roles, then grant and close as declared in this database. (repaired, left): what
    differed before and no longer does, for roles that existed (and for this database's privileges when it
    held our schema before: `database_was_ours`), and what differs still, which init cannot repair."""
    _move_legacy_password(conn)
    before = {role.name: _existing_differences(conn, role, database_was_ours) for role in sandbox.ROLES}
    passwords = {}
    for role in sandbox.ROLES:
        _create_or_align(conn, role)
        _restore_settings(conn, role)
        _revoke_memberships(conn, role)
        _drop_owned_here(conn, role)
        passwords[role.name] = _set_password(conn, dsn, role, existed=before[role.name] is not None)
    _close(conn)
    for role in sandbox.ROLES:
        _grant(conn, role)
    repaired, left = [], []
    for role in sandbox.ROLES:
        after = differences(conn, role)
        fixed = [found for found in before[role.name] or [] if found not in after] + passwords[role.name]
        repaired += [f"{role.name}: {found}" for found in fixed]
        left += [f"{role.name}: {found}" for found in after] + owned_elsewhere(conn, role)
    return repaired, left + server_differences(conn)


def _existing_differences(conn: psycopg.Connection, role: Role, database_was_ours: bool) -> list[str] | None:
    """The role's differences before the repair; None for a role to be created. A database init has not been
    run on yet has none of our grants, which is not a difference to report."""
    if role_attributes(conn, role) is None:
        return None
    return role_differences(conn, role) + (privilege_differences(conn, role) if database_was_ours else [])


def _create_or_align(conn: psycopg.Connection, role: Role) -> None:
    name = sql.Identifier(role.name)
    found = role_attributes(conn, role)
    if found is None:
        try:
            with conn.transaction():  # a savepoint: another session may create the cluster-wide role first
                conn.execute(sql.SQL("CREATE ROLE {}").format(name))
        except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            pass
    elif (found[1], found[2]) == (role.connection_limit, [wanted for _, _, wanted in sandbox.ATTRIBUTES]):
        return
    keywords = " ".join(keyword for keyword, _, _ in sandbox.ATTRIBUTES)
    conn.execute(sql.SQL("ALTER ROLE {} " + keywords + " CONNECTION LIMIT {}").format(
        name, sql.Literal(role.connection_limit)))


def _restore_settings(conn: psycopg.Connection, role: Role) -> None:
    """The role's stored settings exactly as declared: anything else it stored (role-wide or for one database)
    is reset first."""
    rows = stored_settings(conn, role_attributes(conn, role)[0])
    declared = sorted(f"{name}={value}" for name, value in sandbox.settings_of(role).items())
    if [(database, sorted(config)) for database, config in rows] == [("", declared)]:
        return
    name = sql.Identifier(role.name)
    conn.execute(sql.SQL("ALTER ROLE {} RESET ALL").format(name))
    for database, _ in rows:
        if database:
            conn.execute(sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(name, sql.Identifier(database)))
    for setting, value in sandbox.settings_of(role).items():
        conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(name, sql.Identifier(setting), sql.Literal(value)))


def _revoke_memberships(conn: psycopg.Connection, role: Role) -> None:
    rows = conn.execute("SELECT r.rolname, m.rolname FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid "
                        "JOIN pg_roles m ON m.oid = a.member WHERE %s IN (r.rolname, m.rolname)", [role.name])
    for granted, member in rows.fetchall():
        conn.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(granted), sql.Identifier(member)))


def _drop_owned_here(conn: psycopg.Connection, role: Role) -> None:
    """Whatever the role owns in this database (a large object, default privileges it gave itself): dropped.
    DROP OWNED also revokes what was granted to the role, here and on the cluster's databases and tablespaces:
    those grants are given back as they were (and _grant gives this database's)."""
    owns = conn.execute("SELECT 1 FROM pg_shdepend WHERE deptype = 'o' AND refobjid = to_regrole(%s) AND dbid = "
                        "(SELECT oid FROM pg_database WHERE datname = current_database())", [role.name]).fetchone()
    if not owns:
        return
    shared = conn.execute(
        "SELECT 'DATABASE', datname, a.privilege_type FROM pg_database, aclexplode(datacl) a "
        "WHERE a.grantee = to_regrole(%(role)s) UNION ALL "
        "SELECT 'TABLESPACE', spcname, a.privilege_type FROM pg_tablespace, aclexplode(spcacl) a "
        "WHERE a.grantee = to_regrole(%(role)s)", {"role": role.name}).fetchall()
    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role.name)))
    for kind, name, privilege in shared:
        conn.execute(sql.SQL("GRANT " + privilege + " ON " + kind + " {} TO {}").format(
            sql.Identifier(name), sql.Identifier(role.name)))


def _set_password(conn: psycopg.Connection, dsn: str, role: Role, existed: bool) -> list[str]:
    """Give the role its password (_password_for) where its verifier does not match, and keep it here.
    Returns the change to report: a repair (the role's own password differed from the one kept for it)."""
    table = identifier(schema.role_login.fullname)
    kept = conn.execute(sql.SQL("SELECT password FROM {} WHERE role = %s").format(table), [role.name]).fetchone()
    password = _password_for(conn, dsn, role, kept[0] if kept else None)
    if kept is None or kept[0] != password:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s) ON CONFLICT (role) DO UPDATE SET password = "
                             "excluded.password").format(table), [role.name, password])
    if _password_is(conn, role, password):
        return []
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role.name), sql.Literal(password)))
    # A new password the administrator gave ($GSQA_..._PASSWORD) is their change, not a repair to report.
    return ["its password differed from the one kept for it"] if existed and kept and kept[0] == password else []


def _password_for(conn: psycopg.Connection, dsn: str, role: Role, kept: str | None) -> str:
    """The role's variable; else the password this database keeps; else, for a role that exists, the one
    another database of this server keeps and the role has (the roles are the cluster's: every database logs
    them in with the same one, so a second database's init does not take it from the first); else a new one."""
    if os.environ.get(role.password_env):
        return os.environ[role.password_env]
    if kept:
        return kept
    for candidate in _kept_elsewhere(conn, dsn, role):
        if _password_is(conn, role, candidate):
            return candidate
    return secrets.token_urlsafe(18)


def _kept_elsewhere(conn: psycopg.Connection, dsn: str, role: Role) -> list[str]:
    """The passwords the server's other databases keep for the role (those the admin DSN reaches); none where
    no candidate could match: the role has no password yet, or this login may not read its verifier."""
    if not _may_read_verifiers(conn) or conn.execute("SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = %s",
                                                     [role.name]).fetchone()[0]:
        return []
    names = [name for (name,) in conn.execute("SELECT datname FROM pg_database WHERE datallowconn AND "
                                               "datname <> current_database() ORDER BY 1")]
    found = []
    for name in names:
        try:
            with psycopg.connect(make_conninfo(dsn, dbname=name), autocommit=True,
                                 connect_timeout=OTHER_DATABASE_TIMEOUT) as other:
                if other.execute("SELECT to_regclass(%s)", [schema.role_login.fullname]).fetchone()[0]:
                    found += [password for (password,) in other.execute(
                        sql.SQL("SELECT password FROM {} WHERE role = %s").format(
                            identifier(schema.role_login.fullname)), [role.name])]
        except psycopg.Error:
            continue  # a database the admin may not enter, or one going away: not ours to read
    return found


def _may_read_verifiers(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT has_table_privilege('pg_catalog.pg_authid', 'SELECT')").fetchone()[0]


def _password_is(conn: psycopg.Connection, role: Role, password: str) -> bool:
    """Whether the role's stored verifier matches `password` (False where this login may not read it)."""
    if not _may_read_verifiers(conn):
        return False
    stored = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", [role.name]).fetchone()[0] or ""
    if stored.startswith("md5"):
        return hmac.compare_digest(stored, "md5" + hashlib.md5((password + role.name).encode()).hexdigest())
    if not stored.startswith("SCRAM-SHA-256$"):
        return False
    iterations_salt, keys = stored.removeprefix("SCRAM-SHA-256$").split("$")
    iterations, salt = iterations_salt.split(":")
    salted = hashlib.pbkdf2_hmac("sha256", _saslprep(password).encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = base64.b64encode(hashlib.sha256(client_key).digest()).decode()
    return hmac.compare_digest(stored_key, keys.split(":")[0])


def _saslprep(password: str) -> str:
    """The password as PostgreSQL prepares it before hashing it (RFC 4013, as pg_saslprep): characters
    mapped to nothing dropped, other spaces made spaces, NFKC; a password with a prohibited character is
    hashed as it is."""
    mapped = "".join(" " if stringprep.in_table_c12(char) else char for char in password
                     if not stringprep.in_table_b1(char))
    prepared = unicodedata.normalize("NFKC", mapped)
    prohibited = (stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3,
                  stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7,
                  stringprep.in_table_c8, stringprep.in_table_c9)
    return password if any(check(char) for char in prepared for check in prohibited) else prepared


def _move_legacy_password(conn: psycopg.Connection) -> None:
    """A database an older init made keeps the reader's password in gsqa.reader_login: moved to role_login."""
    if conn.execute("SELECT to_regclass(%s)", [schema.LEGACY_READER_LOGIN]).fetchone()[0] is None:
        return
    legacy = identifier(schema.LEGACY_READER_LOGIN)
    conn.execute(sql.SQL("INSERT INTO {} SELECT %s, password FROM {} LIMIT 1 ON CONFLICT (role) DO NOTHING").format(
        identifier(schema.role_login.fullname), legacy), [sandbox.READER.name])
    conn.execute(sql.SQL("DROP TABLE {}").format(legacy))


def _close(conn: psycopg.Connection) -> None:
    """What no sandbox role may do in this database, closed for PUBLIC (privileges granted to PUBLIC cannot be
    revoked from one role) and for the roles themselves: CREATE in any schema, TEMP, writing to any table or
    advancing any sequence someone granted, any grant on the bookkeeping schema's tables and sequences, the
    declared functions and languages. The owner and superusers
    keep them."""
    everyone = sql.SQL(", ").join([sql.SQL("PUBLIC"), *(sql.Identifier(role.name) for role in sandbox.ROLES)])
    database = sql.Identifier(conn.info.dbname)
    conn.execute(sql.SQL("REVOKE CREATE, TEMPORARY ON DATABASE {} FROM {}").format(database, everyone))
    open_schemas = conn.execute("SELECT nspname FROM pg_namespace WHERE " + " OR ".join(
        ["has_schema_privilege(%s, oid, 'CREATE')"] * len(sandbox.ROLES)), [role.name for role in sandbox.ROLES])
    for (name,) in open_schemas.fetchall():
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA {} FROM {}").format(sql.Identifier(name), everyone))
    for what, name in {found for role in sandbox.ROLES for found in writable(conn, role)}:
        kind, privileges = ("SEQUENCE", "USAGE, UPDATE") if what.endswith("sequence") else ("TABLE", TABLE_WRITES)
        conn.execute(sql.SQL("REVOKE " + privileges + " ON " + kind + " " + name + " FROM {}").format(everyone))
    for closed in sandbox.CLOSED_FUNCTIONS:
        if conn.execute("SELECT to_regprocedure(%s)", [closed.function]).fetchone()[0]:
            conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION " + closed.function + " FROM {}").format(everyone))
    bookkeeping = sql.Identifier(schema.BOOKKEEPING_SCHEMA)
    for kind in ("TABLES", "SEQUENCES"):
        conn.execute(sql.SQL("REVOKE ALL ON ALL " + kind + " IN SCHEMA {} FROM {}").format(bookkeeping, everyone))
    for language in sandbox.CLOSED_LANGUAGES:
        conn.execute(sql.SQL("REVOKE USAGE ON LANGUAGE {} FROM {}").format(sql.Identifier(language), everyone))


def _grant(conn: psycopg.Connection, role: Role) -> None:
    """Read the reference tables and what PostGIS functions read (spatial_ref_sys, raster_columns, ...),
    including tables later stages create (or re-create with --replace); nothing of our bookkeeping."""
    name, database = sql.Identifier(role.name), sql.Identifier(conn.info.dbname)
    conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(database, name))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(name))
    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(name))
    conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}").format(name))
    conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(sql.Identifier(schema.BOOKKEEPING_SCHEMA), name))
