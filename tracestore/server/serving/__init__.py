"""What runs before and around the routes in a served process: the request context,
the fast lanes, the body protocol and its connection rules, pathsend, the access log and
the process's heap tuning."""
