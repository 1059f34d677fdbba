"""GET /api/v1/tracesets: the use case (``pages``), its parsed query (``query``), the
plan of a query shape (``plan``) and its SQL (``sql``)."""
