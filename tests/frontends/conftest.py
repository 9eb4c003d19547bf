"""PyTorch for the tests that compare with it."""

from __future__ import annotations

import pytest


@pytest.fixture
def torch():
    """The installed torch (an eval dependency: scripts/test installs it). Imported by the tests
    that use it rather than at module level, so that a machine without torch still collects
    every test, runs the rest, and reports only these as failing."""
    import torch

    return torch
