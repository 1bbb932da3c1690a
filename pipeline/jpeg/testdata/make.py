#!/usr/bin/python3
"""Writes the JPEG fixtures of pipeline/jpeg's tests with encoders other than
Go's (which writes only 4:2:0 and grey, without restart intervals):
Pillow for 4:4:4, 4:2:2, progressive and CMYK (Adobe), OpenCV for restart
intervals. Run from this directory: /usr/bin/python3 make.py
(Debian: python3-pil, python3-opencv, python3-numpy)."""
import cv2
import numpy as np
from PIL import Image


def picture(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([3 * x, 2 * y, x + y], axis=-1).astype(np.int32)
    busy = ((x // 16 + y // 16) % 2 == 0)[..., None]
    img = img + busy * rng.integers(0, 90, size=img.shape)
    return (img % 256).astype(np.uint8)


rgb = picture(61, 43, 1)
Image.fromarray(rgb).save("444.jpg", quality=90, subsampling=0)
Image.fromarray(rgb).save("422.jpg", quality=75, subsampling=1)
Image.fromarray(rgb).save("progressive.jpg", quality=75, progressive=True)
Image.fromarray(rgb).convert("CMYK").save("cmyk.jpg", quality=75)
big = picture(77, 51, 2)
cv2.imwrite("rst420.jpg", cv2.cvtColor(big, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 80, cv2.IMWRITE_JPEG_RST_INTERVAL, 3])
cv2.imwrite("rstgray.jpg", big[..., 1], [cv2.IMWRITE_JPEG_QUALITY, 60, cv2.IMWRITE_JPEG_RST_INTERVAL, 2])
