"""Sinks: every renderer reads a Profile (or an analysis result) and never captures."""
