"""Fixtures shared by the cpu backend's and the bundles' real-model tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def efficientnet_int8():
    """EfficientNet-Lite0 quantized with lowbit's defaults, calibrated on a third of the
    photos (tests/realmodels.py), and the photos."""
    from shared_profiles import shared_profile

    import lowbit
    from lowbit.quant.static import quantize
    from realmodels import efficientnet, load_photos

    photos = load_photos()
    graph = lowbit.load(efficientnet(True))
    calib = [{"input": photos[i:i + 1]} for i in range(0, len(photos), 3)]
    return quantize(graph, shared_profile(graph, calib)).graph, photos
