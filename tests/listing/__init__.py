"""GET /api/v1/tracesets (docs/api.md) on the real app: filters, sorts and cursors, visibility.

Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (through the shared fixtures).
Tracesets are inserted through the ORM: the list reads records, not bytes.
"""
