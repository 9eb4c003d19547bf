"""Integer arithmetic of quantized kernels, defined once: quantize/dequantize, the fixed-point
requantization encodings, and the run-time parameters of dynamic quantization. Below ops and
backends: every consumer (reference kernels, the compiled backend, dump, exporters) calls it."""
