"""The product's verbs: ingest, projection, reconciliation, ledger, alerts, queries,
landing and the dead letter. Built on core/, store/ and adapters/; used by the entry
points (api/, commands/) and the Dagster wiring (orchestration/, defs/)."""
