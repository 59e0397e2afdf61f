"""The usage ledger: the checkpoint-delta poster, its verification, and usage per day."""
