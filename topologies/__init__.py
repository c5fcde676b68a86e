"""Mininet topologies: declarative descriptions, brought up separately."""
