"""The schema names and versions layerprof writes and reads."""

PROFILE_SCHEMA = "layerprof.profile/2"
RUN_SCHEMA = "layerprof.trace/2"
DIFF_SCHEMA = "layerprof.diff/1"
SWEEP_SCHEMA = "layerprof.sweep/1"
LEGACY_PROFILE = "layerprof.profile/1"
LEGACY_RUN = "layerprof.trace/1"
SCHEMAS = (PROFILE_SCHEMA, RUN_SCHEMA, DIFF_SCHEMA, SWEEP_SCHEMA, LEGACY_PROFILE, LEGACY_RUN)
