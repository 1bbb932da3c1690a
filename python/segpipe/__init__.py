"""segpipe for PyTorch: training batches as tensors, from segpipe's loader in
this process (``Loader``) or from `segpipe serve` over Arrow Flight
(``FlightBatches``).

Both (pyarrow and torch) stream one rank's batches, an epoch per iteration
(``Batch`` describes one); ``segpipe.ultralytics``
feeds an Ultralytics segmentation trainer from it. The request, resume-state
and rank logic in ``segpipe.request`` and ``segpipe.dist`` needs neither, so
it imports anywhere.
"""

from .dist import rank_and_world
from .request import (
    MASKS_DENSE,
    MASKS_WINDOWED,
    REQUEST_VERSION,
    Request,
    RequestError,
    ResumeState,
    StateError,
    parse_app_metadata,
)
from .stream import StreamError

# The package's one version: the wheel's (pyproject.toml reads it) and the
# native library's (setup.py builds it in; `segpipe version` prints it).
__version__ = "0.1.0"

__all__ = [
    "Batch",
    "FlightBatches",
    "Loader",
    "MASKS_DENSE",
    "MASKS_WINDOWED",
    "REQUEST_VERSION",
    "Request",
    "RequestError",
    "ResumeState",
    "StateError",
    "StreamError",
    "parse_app_metadata",
    "rank_and_world",
]


def __getattr__(name):
    # FlightBatches needs pyarrow and torch: import them on first use only,
    # so that the pure parts work on machines without them.
    if name == "FlightBatches":
        from .flight import FlightBatches

        return FlightBatches
    if name == "Loader":
        from .loader import Loader

        return Loader
    if name == "Batch":
        from .batch import Batch

        return Batch
    raise AttributeError(f"module 'segpipe' has no attribute {name!r}")
