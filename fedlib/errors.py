"""Errors that users see: one line, naming the field, the value and what is allowed."""


class ConfigError(ValueError):
    """A bad configuration, caught before any training starts."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")


class DataNotFoundError(FileNotFoundError):
    """Dataset files are absent; the message says where they were looked for and how to get them."""


class TrainingDiverged(RuntimeError):
    """A non-finite loss stopped the run; the checkpoint of the last finished round is kept."""


def check(condition: bool, field: str, value, allowed: str) -> None:
    if not condition:
        raise ConfigError(field, value, allowed)
