"""optuna-dashboard's own web API, called in this process through its WSGI app."""

from __future__ import annotations

import io


def get(app, path):
    """(status line, body) of a GET request to the dashboard app."""
    status = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "localhost",
               "SERVER_PORT": "80", "wsgi.input": io.BytesIO(), "wsgi.errors": io.StringIO(), "wsgi.url_scheme": "http"}
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    return status[0], body
