"""``/api/docs``: the console's JSON API described from its own OpenAPI schema, as one page.

FastAPI's Swagger UI loads its script and styles from a CDN; the console fetches nothing
from the network, so it renders the schema itself: each operation's method, path, summary,
parameters and request body, and a link to the schema (``/api/openapi.json``).
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

OPENAPI_URL = "/api/openapi.json"
DOCS_URL = "/api/docs"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; color: #1d2433; }
h2 { font-size: 1rem; margin: 1.4rem 0 .3rem; font-family: ui-monospace, monospace; }
.method { display: inline-block; min-width: 4.2rem; color: #fff; background: #2f5bd3; border-radius: 4px;
  padding: 0 .4rem; margin-right: .5rem; text-align: center; }
.method.post { background: #18a058; } .method.delete { background: #b3261e; } .method.put { background: #d9822b; }
table { border-collapse: collapse; margin: .3rem 0; } td, th { border: 1px solid #dde1e7; padding: .2rem .5rem; }
.muted { color: #5b6475; }
"""


def _schema_name(schema: dict[str, Any]) -> str:
    """A parameter's or body's type as one word (``string``, ``integer``, ``ProduceBody``)."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_schema_name(s) for s in schema["anyOf"])
    return str(schema.get("type", "any"))


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    rows = []
    for param in op.get("parameters", []):
        rows.append(
            f"<tr><td><code>{escape(param['name'])}</code></td><td>{escape(param.get('in', ''))}</td>"
            f"<td>{escape(_schema_name(param.get('schema', {})))}</td>"
            f"<td>{'required' if param.get('required') else ''}</td></tr>"
        )
    body = op.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        rows.append(
            f"<tr><td>body</td><td>JSON</td><td>{escape(_schema_name(body.get('schema', {})))}</td><td></td></tr>"
        )
    table = f"<table><tr><th>name</th><th>in</th><th>type</th><th></th></tr>{''.join(rows)}</table>" if rows else ""
    summary = escape(op.get("description") or op.get("summary") or "")
    return (
        f'<h2><span class="method {method}">{method.upper()}</span>{escape(path)}</h2>'
        f'<div class="muted">{summary}</div>{table}'
    )


def render(schema: dict[str, Any]) -> str:
    """The page for an OpenAPI schema: every operation under ``/api``, in path order."""
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(schema['info']['title'])} API</title>"
        f"<style>{_STYLE}</style></head><body><h1>{escape(schema['info']['title'])}: JSON API</h1>"
        f"<p class='muted'>The API the console's pages use. The whole schema: <a href='{OPENAPI_URL}'>{OPENAPI_URL}</a>."
        " A change (POST, PUT, DELETE) needs an <code>Origin</code> header naming the console.</p>"
    ]
    for path, methods in sorted(schema.get("paths", {}).items()):
        if not path.startswith("/api/"):
            continue
        for method, op in methods.items():
            parts.append(_operation(method, path, op))
    parts.append("</body></html>")
    return "".join(parts)


def add_api_docs(app: FastAPI) -> None:
    """Serve :func:`render` of ``app``'s schema at ``/api/docs``."""

    @app.get(DOCS_URL, include_in_schema=False)
    def api_docs() -> HTMLResponse:
        return HTMLResponse(render(app.openapi()))
