"""Geometry of SO(3) and rigid bodies: rotations, inertia, states."""
