"""The real photos of ../shared/EVAL.md (scikit-image, scikit-learn and Debian opencv-doc
images, about 100), as EfficientNet-Lite0 inputs: 224 x 224 centre crops of the image resized
to 256 on its short side, scaled as (x - 127) / 128, NCHW float32."""

from __future__ import annotations

import glob
import os

import numpy as np

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
        raise SystemExit("no photos found: pip install scikit-image scikit-learn; "
                         "apt-get install opencv-doc")
    return (np.stack(arrays) - 127.0) / 128.0
