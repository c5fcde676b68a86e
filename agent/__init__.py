"""Host agent: learns local cojobs, enforces per-flow priorities, serves the coordinator."""
