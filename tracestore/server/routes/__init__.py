"""HTTP only, one module per resource: parse, call one use case, answer a schema.

``app.create_app`` includes each module's router; the order it does so is the order of the
OpenAPI document.
"""
