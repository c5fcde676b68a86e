"""Flow-level, event-driven simulator running the same scheduling core as deployment."""
