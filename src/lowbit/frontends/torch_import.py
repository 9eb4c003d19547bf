"""PyTorch entry point: a module and example inputs, through torch's ONNX export, to an ONNX
file that `lowbit.from_torch` imports.

torch stays optional: it is imported only here, and its absence is a clear error.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from lowbit.errors import UnsupportedError
from lowbit.frontends.torch_dynamic import MARKER_DOMAIN, expand_markers, swapped_dynamic_linears

EXPORT_OPSET = 17


def export_onnx(module: Any, example_inputs: Sequence[Any], path: Path, *,
                input_names: Sequence[str] | None = None,
                output_names: Sequence[str] | None = None,
                dynamic_axes: dict[str, dict[int, str]] | None = None) -> None:
    """Export `module` (in eval mode) with `example_inputs` by `torch.onnx.export` (the
    TorchScript exporter, opset 17) to the ONNX file `path`; dynamically quantized Linear
    modules become lowbit's marker nodes, expanded into integer ops.

    `input_names` default to input_0, input_1, ...; `dynamic_axes` names symbolic dims as in
    torch.onnx.export ({"input_0": {0: "batch"}}). Raises UnsupportedError when torch is not
    installed (`pip install torch==2.13.0`).
    """
    try:
        import torch
    except ImportError:
        raise UnsupportedError("lowbit.from_torch needs PyTorch: pip install torch==2.13.0 "
                               "(or export the model to ONNX and use lowbit.load)") from None
    if module.training:
        module = module.eval()
    args = tuple(example_inputs)
    names = list(input_names or [f"input_{i}" for i in range(len(args))])
    with warnings.catch_warnings(), swapped_dynamic_linears(module) as linears:
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=EXPORT_OPSET,
                          input_names=names,
                          output_names=list(output_names) if output_names else None,
                          dynamic_axes=dynamic_axes,
                          custom_opsets={MARKER_DOMAIN: 1} if linears else None)
    if linears:
        model = onnx.load(str(path))
        expand_markers(model, linears)
        onnx.save(model, str(path))
