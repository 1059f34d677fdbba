"""GET /api/v1/tracesets (SPEC 5.6) on the real app: filters, sorts and cursors, visibility.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (through the shared fixtures).
Tracesets are inserted through the ORM: the list reads records, not bytes.
"""
