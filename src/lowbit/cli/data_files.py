"""Reading arrays for the CLI: `NAME=FILE.npy` inputs, and calibration data sets (.npy/.npz
files, folders of images or of .npy/.npz files, ONNX test_data_set folders), always naming the
file at fault. A data set is a list of `BatchRef`s, each reading one batch where it runs (in
this process, or on a cluster's worker)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
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
                        layout: str = "NCHW", limit: int | None = None
                        ) -> list[dict[str, np.ndarray]]:
    """Calibration batches from `source` (`batch_refs` says how it is cut), read."""
    return [ref.load(graph) for ref in batch_refs(source, graph, batch_size=batch_size,
                                                   image_size=image_size, mean=mean, std=std,
                                                   layout=layout, limit=limit)]


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

    def load(self, graph: Graph) -> dict[str, np.ndarray]:
        if self.kind == "pb":
            return _test_data_set(Path(self.paths[0]), graph)
        if self.kind == "images":
            assert self.image_size is not None
            return _images([Path(p) for p in self.paths], graph, self.image_size, self.mean,
                           self.std, self.layout)
        path = Path(self.paths[0])
        if self.kind == "npy":
            array = load_array(path, mmap=True)
            return {graph.inputs[0].name: np.array(array[self.start:self.stop])}
        with np.load(path, allow_pickle=False) as data:
            return {v.name: data[v.name][self.start:self.stop] for v in graph.inputs}


def batch_refs(source: str, graph: Graph, *, batch_size: int = 8,
               image_size: tuple[int, int] | None = None, mean: Sequence[float] = (0.0,),
               std: Sequence[float] = (1.0,), layout: str = "NCHW",
               limit: int | None = None) -> list[BatchRef]:
    """The batches of `source`, in order:

    - `file.npy`: one array for a one-input model, cut into batches along axis 0;
    - `file.npz`: arrays named like the model's inputs, cut the same way;
    - a folder of ONNX `test_data_set_*` folders (input_0.pb, ...), one batch each;
    - a folder of images: resized to `image_size` (default: the model's input size), scaled to
      [0, 255], normalised as (x - mean) / std per channel, laid out as `layout`, `batch_size`
      files a batch in name order;
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
            files = list(_image_files(p))
            if not files:
                raise InputError(f"{p}: no images ({', '.join(IMAGE_SUFFIXES)}), .npy or .npz "
                                 f"files, or test_data_set folders")
            size = _image_size(p, graph, image_size, layout)
            refs = [BatchRef("images", tuple(str(f) for f in files[i:i + batch_size]),
                             image_size=size, mean=tuple(mean), std=tuple(std), layout=layout)
                    for i in range(0, len(files), batch_size)]
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
        rows = len(load_array(p, mmap=True))
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
                rows = min(len(data[n]) for n in names)
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"{p}: not a readable .npz file ({exc})") from None
        kind = "npz"
    return [BatchRef(kind, (str(p),), i, min(i + batch_size, rows))
            for i in range(0, rows, batch_size)]


def _test_data_set(folder: Path, graph: Graph) -> dict[str, np.ndarray]:
    files = sorted(folder.glob("input_*.pb"), key=lambda f: int(f.stem.split("_")[1]))
    if len(files) != len(graph.inputs):
        raise InputError(f"{folder}: {len(files)} input_*.pb files for a model with "
                         f"{len(graph.inputs)} inputs")
    return {v.name: load_array(f) for v, f in zip(graph.inputs, files, strict=True)}


def _image_size(folder: Path, graph: Graph, size, layout) -> tuple[int, int]:
    if len(graph.inputs) != 1:
        raise InputError(f"{folder}: image folders feed one-input models")
    v = graph.inputs[0]
    shape = v.type.shape if v.type is not None else None
    if size is not None:
        return (int(size[0]), int(size[1]))
    if shape is None or len(shape) != 4:
        raise InputError(f"{folder}: give --image-size H W (the model's input size is "
                         f"not a static 4-D shape)")
    h, w = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if not isinstance(h, int) or not isinstance(w, int):
        raise InputError(f"{folder}: give --image-size H W (the model's input size is "
                         f"symbolic)")
    return (h, w)


def _images(files: list[Path], graph: Graph, size, mean, std, layout) -> dict[str, np.ndarray]:
    from PIL import Image

    arrays = []
    for f in files:
        try:
            with Image.open(f) as im:
                arrays.append(np.asarray(im.convert("RGB").resize((size[1], size[0])),
                                         np.float32))
        except OSError as exc:
            raise InputError(f"{f}: not a readable image ({exc})") from None
    x = (np.stack(arrays) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    if layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    return {graph.inputs[0].name: np.ascontiguousarray(x, dtype=np.float32)}


def _image_files(folder: Path) -> Iterator[Path]:
    return iter(sorted(f for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES))
