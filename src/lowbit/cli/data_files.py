"""Reading arrays for the CLI: `NAME=FILE.npy` inputs, and calibration data sets (.npy/.npz
files, folders of images or of .npy/.npz files, ONNX test_data_set folders), always naming the
file at fault. A data set is a list of `BatchRef`s, each reading one batch where it runs (in
this process, or on a cluster's worker)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowbit.errors import InputError
from lowbit.ir.graph import Graph

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def load_array(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """An .npy (or a TensorProto .pb) file's array; `mmap` maps an .npy file instead of
    reading it (a batch then reads its rows only)."""
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
        return np.load(p, allow_pickle=False, mmap_mode="r" if mmap else None)
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
    """Calibration batches from `source` (`batch_refs` says how it is cut), read."""
    return [ref.load(graph) for ref in batch_refs(source, graph, batch_size=batch_size,
                                                   image_size=image_size, mean=mean, std=std,
                                                   layout=layout, limit=limit,
                                                   grayscale=grayscale)]


@dataclass(frozen=True)
class BatchRef:
    """Where one batch of calibration data is: rows `start:stop` of a .npy file or of the
    arrays of an .npz file, an ONNX test_data_set folder, or image files. `load(graph)` reads
    it; a single process and the workers of a cluster read batches through the same refs, so
    they see the same arrays."""

    kind: str
    """"npy", "npz", "pb" (a test_data_set folder) or "images"."""
    paths: tuple[str, ...]
    start: int = 0
    stop: int = 0
    image_size: tuple[int, int] | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str = "NCHW"
    mode: str = "RGB"
    """The PIL mode images are read in (`_image_mode`)."""

    def load(self, graph: Graph) -> dict[str, np.ndarray]:
        if self.kind == "pb":
            return _test_data_set(Path(self.paths[0]), graph)
        if self.kind == "images":
            assert self.image_size is not None
            return _images([Path(p) for p in self.paths], graph, self.image_size, self.mean,
                           self.std, self.layout, self.mode)
        path = Path(self.paths[0])
        if self.kind == "npy":
            array = load_array(path, mmap=True)
            return {graph.inputs[0].name: np.array(array[self.start:self.stop])}
        with np.load(path, allow_pickle=False) as data:
            return {v.name: data[v.name][self.start:self.stop] for v in graph.inputs}


def batch_refs(source: str, graph: Graph, *, batch_size: int = 8,
               image_size: tuple[int, int] | None = None, mean: Sequence[float] = (0.0,),
               std: Sequence[float] = (1.0,), layout: str = "NCHW",
               limit: int | None = None, grayscale: bool = False) -> list[BatchRef]:
    """The batches of `source`, in order:

    - `file.npy`: one array for a one-input model, cut into batches along axis 0;
    - `file.npz`: arrays named like the model's inputs, cut the same way;
    - a folder of ONNX `test_data_set_*` folders (input_0.pb, ...), one batch each;
    - a folder of images: resized to `image_size` (default: the model's input size), scaled to
      [0, 255], normalised as (x - mean) / std per channel, laid out as `layout`, with the
      model's channel count (1: luminance, 3: RGB, 4: RGBA; RGB when the model does not say)
      or one luminance channel with `grayscale`, `batch_size` files a batch in name order;
      files that are not images are skipped with a note on stderr;
    - a folder of .npy / .npz files: each file as above, in name order (a batch never spans
      two files).
    """
    p = Path(source)
    if p.is_dir():
        sets = sorted(d for d in p.iterdir() if d.is_dir() and d.name.startswith("test_data_set"))
        if sets or (p / "input_0.pb").exists():
            refs = [BatchRef("pb", (str(d),)) for d in (sets or [p])]
        elif any(f.suffix in (".npy", ".npz") for f in p.iterdir() if f.is_file()):
            files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".npy", ".npz"))
            refs = [r for f in files for r in _array_refs(f, graph, batch_size)]
        else:
            refs = _image_refs(p, graph, batch_size, image_size, mean, std, layout, grayscale)
    elif p.suffix in (".npz", ".npy"):
        refs = _array_refs(p, graph, batch_size)
    else:
        raise InputError(f"{source}: calibration data must be a .npy or .npz file, a folder of "
                         f"images, of .npy/.npz files or of ONNX test_data_set folders")
    if limit is not None:
        refs = refs[:limit]
    if not refs:
        raise InputError(f"{source}: holds no calibration data")
    return refs


def _array_refs(p: Path, graph: Graph, batch_size: int) -> list[BatchRef]:
    names = [v.name for v in graph.inputs]
    if p.suffix == ".npy":
        if len(graph.inputs) != 1:
            raise InputError(f"{p}: a .npy file feeds one-input models; this one has "
                             f"{len(graph.inputs)} inputs: use a .npz keyed by input name")
        shapes = {names[0]: load_array(p, mmap=True).shape}
        kind = "npy"
    else:
        if not p.is_file():
            raise InputError(f"{p}: no such file")
        try:
            with np.load(p, allow_pickle=False) as data:
                missing = [n for n in names if n not in data.files]
                if missing:
                    raise InputError(f"{p}: has arrays {', '.join(data.files)}; the model needs "
                                     f"{', '.join(names)}")
                shapes = {n: data[n].shape for n in names}
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"{p}: not a readable .npz file ({exc})") from None
        kind = "npz"
    for name, shape in shapes.items():
        if len(shape) == 0:
            raise InputError(f"{p}: array '{name}' is 0-d (a single number); calibration "
                             f"data needs a leading axis of samples, e.g. shape (N, ...)")
    rows = min(shape[0] for shape in shapes.values())
    return [BatchRef(kind, (str(p),), i, min(i + batch_size, rows))
            for i in range(0, rows, batch_size)]


def _test_data_set(folder: Path, graph: Graph) -> dict[str, np.ndarray]:
    files = sorted(folder.glob("input_*.pb"), key=lambda f: int(f.stem.split("_")[1]))
    if len(files) != len(graph.inputs):
        raise InputError(f"{folder}: {len(files)} input_*.pb files for a model with "
                         f"{len(graph.inputs)} inputs")
    return {v.name: load_array(f) for v, f in zip(graph.inputs, files, strict=True)}


IMAGE_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
"""PIL modes by the number of channels a model's image input has."""
MAX_IMAGE_SIDE = 1 << 14


def _image_refs(folder: Path, graph: Graph, batch_size: int, size, mean, std, layout: str,
                grayscale: bool) -> list[BatchRef]:
    """A folder's images as batches of `batch_size` files: the options are checked and every
    file's header read here (files that are not images are skipped with a note), the pixels
    where each batch is loaded."""
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
    _per_channel("--mean", mean, count, mode)
    std_a = _per_channel("--std", std, count, mode)
    if not np.all(np.isfinite(std_a)) or np.any(std_a == 0):
        raise InputError(f"--std {' '.join(f'{s:g}' for s in std)}: divisors must be finite "
                         "and non-zero")
    files, skipped, converted = [], [], set()
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
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            skipped.append(f"{f.name} (not a readable image: {exc})")
            continue
        files.append(f)
    for note in skipped:
        print(f"note: {folder}: skipped {note}", file=sys.stderr)
    if converted and not grayscale:
        print(f"note: {folder}: {'/'.join(sorted(converted))} images read as {mode}, the "
              f"model's {count} channel{'s' if count > 1 else ''}"
              + (" (--grayscale says so explicitly)" if mode == "L" else ""), file=sys.stderr)
    if not files:
        raise InputError(f"{folder}: no readable images ({', '.join(IMAGE_SUFFIXES)})")
    hw = (int(size[0]), int(size[1]))
    return [BatchRef("images", tuple(str(f) for f in files[i:i + batch_size]), image_size=hw,
                     mean=tuple(float(m) for m in mean), std=tuple(float(s) for s in std),
                     layout=layout, mode=mode)
            for i in range(0, len(files), batch_size)]


def _images(files: list[Path], graph: Graph, size: tuple[int, int], mean, std, layout: str,
            mode: str) -> dict[str, np.ndarray]:
    """One batch of images, read in `mode`, resized to `size`, normalised and laid out."""
    from PIL import Image

    count = len(mode)
    arrays = []
    for f in files:
        try:
            with Image.open(f) as im:
                arrays.append(np.asarray(im.convert(mode).resize((size[1], size[0])),
                                         np.float32).reshape(size[0], size[1], count))
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            raise InputError(f"{f}: not a readable image ({exc})") from None
    x = (np.stack(arrays) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    if layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    return {graph.inputs[0].name: np.ascontiguousarray(x, dtype=np.float32)}


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
