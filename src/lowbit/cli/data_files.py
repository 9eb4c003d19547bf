"""Reading arrays for the CLI: `NAME=FILE.npy` inputs, and calibration data sets (.npy/.npz
files, folders of images, ONNX test_data_set folders), always naming the file at fault."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lowbit.errors import InputError
from lowbit.ir.graph import Graph

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def load_array(path: str | os.PathLike) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    try:
        if p.suffix == ".pb":
            import onnx
            from onnx import numpy_helper

            tensor = onnx.TensorProto()
            tensor.ParseFromString(p.read_bytes())
            return numpy_helper.to_array(tensor)
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{p}: not a readable .npy file ({exc})") from None


def add_input_arg(p) -> None:
    """`--input` for `lowbit run` and `lowbit dump` (parse_inputs reads it)."""
    p.add_argument("--input", action="extend", nargs="+", default=[],
                   metavar="NAME=FILE.npy|FILE.npz",
                   help="input arrays: NAME=FILE.npy per input, FILE.npy for a one-input model, "
                   "or an .npz of arrays named like the inputs (`--input a=x.npy b=y.npy` or "
                   "`--input a=x.npy --input b=y.npy`)")


def add_fix_input_arg(p) -> None:
    """`--fix-input NAME=VALUE ...`: inputs made constants at load (`lowbit.load`'s
    `fixed_inputs`)."""
    p.add_argument("--fix-input", action="extend", nargs="+", default=[],
                   metavar="NAME=VALUE",
                   help="make an input a constant, so that what it decides folds away "
                   "(`--fix-input sr=16000`); VALUE is a number, numbers separated by commas, "
                   "or FILE.npy")


def fixed_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """`NAME=VALUE` specs of --fix-input as {name: array}."""
    fixed: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep or not name or not text:
            raise InputError(f"--fix-input {spec!r}: write NAME=VALUE (a number, numbers "
                             f"separated by commas, or FILE.npy)")
        if text.endswith(".npy"):
            fixed[name] = load_array(text)
            continue
        try:
            numbers = [int(t) if t.strip().lstrip("+-").isdigit() else float(t)
                       for t in text.split(",")]
        except ValueError:
            raise InputError(f"--fix-input {spec!r}: {text!r} is not a number, numbers "
                             f"separated by commas, or an .npy file") from None
        fixed[name] = np.array(numbers[0] if len(numbers) == 1 and "," not in text
                               else numbers)
    return fixed


def parse_inputs(specs: Sequence[str], graph: Graph) -> dict[str, np.ndarray]:
    """`NAME=FILE.npy` specs as {name: array}; a single `FILE.npy` feeds a one-input model; a
    `FILE.npz` gives the arrays named like the model's inputs (other arrays are refused)."""
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep and spec.endswith(".npz"):
            inputs.update(_input_npz(Path(spec), graph))
            continue
        if not sep:
            if len(graph.inputs) != 1:
                raise InputError(f"--input {spec!r}: write NAME=FILE.npy; the model's inputs "
                                 f"are {', '.join(v.name for v in graph.inputs)}")
            name, file = graph.inputs[0].name, spec
        inputs[name] = load_array(file)
    return inputs


def _input_npz(path: Path, graph: Graph) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    names = [v.name for v in graph.inputs]
    try:
        with np.load(path, allow_pickle=False) as data:
            extra = [k for k in data.files if k not in names]
            if extra:
                raise InputError(f"{path}: arrays {', '.join(extra)} are not inputs of the "
                                 f"model; its inputs are {', '.join(names)}")
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz file ({exc})") from None


def calibration_batches(source: str, graph: Graph, *, batch_size: int = 8,
                        image_size: tuple[int, int] | None = None,
                        mean: Sequence[float] = (0.0,), std: Sequence[float] = (1.0,),
                        layout: str = "NCHW", limit: int | None = None,
                        grayscale: bool = False) -> list[dict[str, np.ndarray]]:
    """Calibration batches from `source`:

    - `file.npy`: one array for a one-input model, split into batches along axis 0;
    - `file.npz`: arrays named like the model's inputs, split the same way;
    - a folder of ONNX `test_data_set_*` folders (input_0.pb, ...), one batch each;
    - a folder of images: resized to `image_size` (default: the model's input size), scaled to
      [0, 255], normalised as (x - mean) / std per channel, laid out as `layout`, with the
      model's channel count (1: luminance, 3: RGB, 4: RGBA; RGB when the model does not say)
      or one luminance channel with `grayscale`; files that are not images are skipped with a
      note on stderr.
    """
    p = Path(source)
    if p.is_dir():
        sets = sorted(d for d in p.iterdir() if d.is_dir() and d.name.startswith("test_data_set"))
        if sets or (p / "input_0.pb").exists():
            batches = [_test_data_set(d, graph) for d in (sets or [p])]
        else:
            batches = _split(_images(p, graph, image_size, mean, std, layout, grayscale),
                             batch_size, p)
    elif p.suffix == ".npz":
        if not p.is_file():
            raise InputError(f"{p}: no such file")
        try:
            with np.load(p, allow_pickle=False) as data:
                names = [v.name for v in graph.inputs]
                missing = [n for n in names if n not in data.files]
                if missing:
                    raise InputError(f"{p}: has arrays {', '.join(data.files)}; the model "
                                     f"needs {', '.join(names)}")
                arrays = {n: data[n] for n in names}
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"{p}: not a readable .npz file ({exc})") from None
        batches = _split(arrays, batch_size, p)
    elif p.suffix == ".npy":
        if len(graph.inputs) != 1:
            raise InputError(f"{p}: a .npy file feeds one-input models; this one has "
                             f"{len(graph.inputs)} inputs: use a .npz keyed by input name")
        batches = _split({graph.inputs[0].name: load_array(p)}, batch_size, p)
    else:
        raise InputError(f"{source}: calibration data must be a .npy or .npz file, a folder of "
                         f"images or of ONNX test_data_set folders")
    if limit is not None:
        batches = batches[:limit]
    if not batches:
        raise InputError(f"{source}: holds no calibration data")
    return batches


def _split(arrays: dict[str, np.ndarray], batch_size: int, source: Path
           ) -> list[dict[str, np.ndarray]]:
    """Batches of `batch_size` samples along the first axis of every array."""
    for name, a in arrays.items():
        if a.ndim == 0:
            raise InputError(f"{source}: array '{name}' is 0-d (a single number); calibration "
                             f"data needs a leading axis of samples, e.g. shape (N, ...)")
    n = min(len(a) for a in arrays.values()) if arrays else 0
    return [{k: a[i:i + batch_size] for k, a in arrays.items()} for i in range(0, n, batch_size)]


def _test_data_set(folder: Path, graph: Graph) -> dict[str, np.ndarray]:
    files = sorted(folder.glob("input_*.pb"), key=lambda f: int(f.stem.split("_")[1]))
    if len(files) != len(graph.inputs):
        raise InputError(f"{folder}: {len(files)} input_*.pb files for a model with "
                         f"{len(graph.inputs)} inputs")
    return {v.name: load_array(f) for v, f in zip(graph.inputs, files, strict=True)}


IMAGE_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
"""PIL modes by the number of channels a model's image input has."""
MAX_IMAGE_SIDE = 1 << 14


def _images(folder: Path, graph: Graph, size, mean, std, layout: str, grayscale: bool
            ) -> dict[str, np.ndarray]:
    from PIL import Image

    if len(graph.inputs) != 1:
        raise InputError(f"{folder}: image folders feed one-input models")
    v = graph.inputs[0]
    shape = v.type.shape if v.type is not None else None
    spatial = None if shape is None or len(shape) != 4 else (
        (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2]))
    if size is None:
        if spatial is None:
            raise InputError(f"{folder}: give --image-size H W (the model's input size is "
                             f"not a static 4-D shape)")
        if not all(isinstance(d, int) for d in spatial):
            raise InputError(f"{folder}: give --image-size H W (the model's input size is "
                             f"symbolic)")
        size = spatial
    if not all(1 <= int(d) <= MAX_IMAGE_SIDE for d in size):
        raise InputError(f"--image-size {size[0]} {size[1]}: each side must be between 1 and "
                         f"{MAX_IMAGE_SIDE}")
    channels = None if shape is None or len(shape) != 4 else (
        shape[1] if layout == "NCHW" else shape[3])
    mode = _image_mode(folder, channels, layout, grayscale)
    count = len(mode)
    mean_a = _per_channel("--mean", mean, count, mode)
    std_a = _per_channel("--std", std, count, mode)
    if not np.all(np.isfinite(std_a)) or np.any(std_a == 0):
        raise InputError(f"--std {' '.join(f'{s:g}' for s in std)}: divisors must be finite "
                         "and non-zero")
    arrays, skipped, converted = [], [], set()
    for f in sorted(folder.iterdir()):
        if f.is_dir():
            continue
        if f.suffix.lower() not in IMAGE_SUFFIXES:
            skipped.append(f"{f.name} (not an image file name)")
            continue
        try:
            with Image.open(f) as im:
                if len(im.getbands()) != count and im.mode not in ("P", "1"):
                    converted.add(im.mode)
                arrays.append(np.asarray(im.convert(mode).resize((int(size[1]), int(size[0]))),
                                         np.float32).reshape(int(size[0]), int(size[1]), count))
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            skipped.append(f"{f.name} (not a readable image: {exc})")
    for note in skipped:
        print(f"note: {folder}: skipped {note}", file=sys.stderr)
    if converted and not grayscale:
        print(f"note: {folder}: {'/'.join(sorted(converted))} images read as {mode}, the "
              f"model's {count} channel{'s' if count > 1 else ''}"
              + (" (--grayscale says so explicitly)" if mode == "L" else ""), file=sys.stderr)
    if not arrays:
        raise InputError(f"{folder}: no readable images ({', '.join(IMAGE_SUFFIXES)})")
    x = (np.stack(arrays) - mean_a) / std_a
    if layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    return {v.name: np.ascontiguousarray(x, dtype=np.float32)}


def _image_mode(folder: Path, channels, layout: str, grayscale: bool) -> str:
    """The PIL mode images are read in: luminance with `grayscale`, else by the model's
    channel count."""
    if grayscale:
        if isinstance(channels, int) and channels != 1:
            raise InputError(f"--grayscale gives one channel, but the model's input has "
                             f"{channels} ({layout}); drop --grayscale")
        return "L"
    if not isinstance(channels, int):
        return "RGB"
    if channels not in IMAGE_MODES:
        raise InputError(f"{folder}: the model's input has {channels} channels ({layout}); "
                         f"images give 1 (--grayscale), 3 (RGB) or 4 (RGBA): check --layout, "
                         f"or calibrate from an .npy/.npz file")
    return IMAGE_MODES[channels]


def _per_channel(option: str, values: Sequence[float], count: int, mode: str) -> np.ndarray:
    """`values` as a per-channel array: one value for every channel, or one per channel."""
    if len(values) not in (1, count):
        raise InputError(f"{option} has {len(values)} values; images are read as {mode} "
                         f"({count} channel{'s' if count > 1 else ''}): give 1 value or "
                         f"{count}")
    return np.asarray(values, np.float32)
