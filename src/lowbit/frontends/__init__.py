"""Model frontends: ONNX import and export, PyTorch entry point."""
