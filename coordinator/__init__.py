"""The coordinator: collects agents' reports, runs pda/, pushes versioned plans."""
