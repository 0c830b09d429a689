"""Analyses of the pivot: ``diff`` (two profiles, with noise) and ``diagnose``
(findings). They read Profiles, Runs and Diffs and never print."""
