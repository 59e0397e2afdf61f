"""A ground-truth cloud simulator: what really happened, what the collectors said, what the platform shows."""
