"""rayqueue's web console (``rayqueue console``): overview, topics, message browser,
consumer groups and transactions of a running cluster, served by FastAPI on uvicorn
(``rayqueue.console.app``). Importing this package alone does not import the web stack."""

# Loopback by default: the console can delete topics and move offsets, so reaching it from
# another machine is something an operator opts into (--host).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8088

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT"]
