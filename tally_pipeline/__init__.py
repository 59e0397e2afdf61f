"""tally-pipeline: a trustworthy history of every billable cloud resource, and a convergent usage ledger."""

__version__ = "0.1.0"
