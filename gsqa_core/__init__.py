"""What the loaders (`ingest`) and the verifier (`reproduce`) share, so that neither imports the other: the
reference schema, the database connection (one DSN resolution), the sandbox and its roles, user errors and exit
codes, and the command-group plumbing of both CLIs."""
