"""optuna-dashboard's own web API, called in this process through its WSGI app."""

from __future__ import annotations

import io
import json


def get(app, path):
    """(status line, body) of a GET request to the dashboard app."""
    return request(app, "GET", path)


def put(app, path, document):
    """(status line, body) of a PUT request with a JSON body (the note editor's save)."""
    return request(app, "PUT", path, json.dumps(document).encode())


def request(app, method, path, body=b""):
    status = []
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "localhost",
               "SERVER_PORT": "80", "wsgi.input": io.BytesIO(body), "wsgi.errors": io.StringIO(),
               "wsgi.url_scheme": "http", "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body))}
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    return status[0], body
