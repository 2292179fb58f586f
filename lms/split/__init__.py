"""Ops too large to swap, split into pieces computed one after the other: what splits and how its
inputs are read, the op rewrite, and when and what to split so that a plan fits (`fit`)."""
