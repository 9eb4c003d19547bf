"""Quantizing to an accuracy budget: the fewest layers raised to higher precision that make the
quantized model meet a metric on evaluation data (`lowbit.quantize_to_budget`)."""
