"""fedlib: prototype-based personalized federated learning, one round engine, tensors on device."""

__version__ = "0.1.0"

from fedlib.errors import ConfigError, DataNotFoundError, StorageFailed, TrainingDiverged  # noqa: F401
