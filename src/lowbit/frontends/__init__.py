"""Model frontends: ONNX import, PyTorch entry point."""
