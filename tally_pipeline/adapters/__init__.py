"""Platform adapters: how reconciliation sees what a cloud really holds."""
