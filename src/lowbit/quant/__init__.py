"""Quantization: observers, profiles, calibration, schemes, configs, quantizers."""
