"""Replays parameter-server and ring all-reduce training traffic over real TCP."""
