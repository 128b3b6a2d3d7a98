"""run(config) -> result record. Layers, each importing only those before it:
config (fields, scales, validation, cache key) -> records (provenance, cache I/O) and wiring (config -> Federation)
-> runner (run, run_many; the Flower engine is reached from here)."""
from fedlib.experiment.config import (
                                      BUDGETS,
                                      DEFAULT_CACHE,
                                      ENGINES,
                                      FIELDS,
                                      OFF_BY_DEFAULT,
                                      RECORDED_SCALES,
                                      SCALES,
                                      Config,
                                      make_config,
                                      validate,
)
from fedlib.experiment.records import (
                                      atomic_json,
                                      cache_lock,
                                      code_version,
                                      device_description,
                                      read_cached_record,
                                      record_of,
)
from fedlib.experiment.runner import (
                                      LOCKSTEP_CHECKPOINT_S,
                                      PER_RUN_FIELDS,
                                      SUMMARY_METRICS,
                                      lockstep_groups,
                                      lockstep_key,
                                      run,
                                      run_many,
                                      run_seeds,
                                      summarize_runs,
                                      trained,
)
from fedlib.experiment.wiring import build, load_data, seed_everything

__all__ = ["BUDGETS", "DEFAULT_CACHE", "ENGINES", "FIELDS", "OFF_BY_DEFAULT", "RECORDED_SCALES", "SCALES", "Config",
           "make_config",
           "validate",
           "atomic_json", "cache_lock", "code_version", "device_description", "read_cached_record", "record_of",
           "LOCKSTEP_CHECKPOINT_S", "PER_RUN_FIELDS", "SUMMARY_METRICS", "lockstep_groups", "lockstep_key", "run",
           "run_many", "trained", "run_seeds", "summarize_runs", "build", "load_data", "seed_everything"]
