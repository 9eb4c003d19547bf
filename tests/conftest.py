"""Test-wide settings: the IR verifier runs after every pass."""

from __future__ import annotations

import os

os.environ.setdefault("LOWBIT_VERIFY", "1")
