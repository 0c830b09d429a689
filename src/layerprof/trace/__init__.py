"""Kineto / Chrome trace reader and analyses (no torch import)."""
