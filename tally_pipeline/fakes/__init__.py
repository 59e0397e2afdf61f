"""Fakes of outside systems, real enough to be driven by their real clients (tests and benchmarks)."""
