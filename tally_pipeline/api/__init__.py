"""The ingest and query HTTP API (Starlette, served by uvicorn)."""
