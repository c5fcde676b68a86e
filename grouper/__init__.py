"""Grouper: cojob-aware network scheduling for deep-learning clusters."""
