"""Exporters: a Graph written as ONNX (float, QDQ or QOperator form; dynamic products lowered to
what ONNX Runtime runs)."""
