"""Benchmarks behind ``tally bench …``: each measures, prints JSON, and asserts nothing."""
