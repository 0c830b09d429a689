"""Per-layer history across commits (``layerprof history``; docs/history.md).

``records`` the values (a run coming in, a run read back, its environment),
``ingest`` a Profile -> the runs it brings, ``store`` the SQLite file (schema,
migrations, transactions), ``series`` the newest runs as one value per run,
``changepoints`` the change-point method (pure numpy), ``changes`` a window ->
trends and change points, ``gate`` the check's verdict. No torch; the CLI reads
saved profiles through the codec and hands Profiles in.
"""
