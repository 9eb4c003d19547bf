"""Errors that lowbit reports to users.

Every error a user can cause (a bad model, bad input data, a bad config) is a `LowbitError` whose
message names the file, node, op or tensor and says what to do. The CLI prints it on one line and
exits non-zero; anything else escaping is a bug in lowbit.
"""

from __future__ import annotations


class LowbitError(Exception):
    """A problem with the user's model, data or settings, explained in the message."""


class ModelError(LowbitError):
    """The model file or graph cannot be handled."""


class UnsupportedError(ModelError):
    """The model uses an op, opset, dtype or feature lowbit does not support."""


class InputError(LowbitError):
    """Input or calibration data does not fit the model."""


class VerifyError(LowbitError):
    """The graph breaks an IR invariant (a lowbit bug when raised after a pass)."""


class KernelError(LowbitError):
    """A kernel failed while executing a node."""


class ConfigError(LowbitError):
    """A quantization config (YAML file or Python object) is invalid or does not fit the model."""
