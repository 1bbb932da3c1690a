"""segpipe for PyTorch: training batches as tensors, from segpipe's loader in
this process (``Loader``) or from `segpipe serve` over Arrow Flight
(``FlightBatches``).

Both stream one rank's batches, an epoch per iteration (``Batch``
describes one); ``segpipe.ultralytics`` feeds an Ultralytics segmentation
trainer from it. The request, resume-state and rank logic in
``segpipe.request`` and ``segpipe.dist`` needs no third-party package, so it
imports anywhere.

``pip install segpipe`` needs pyarrow and numpy only: ``Loader`` and its
``record_batches()`` (Arrow records) and ``numpy_batch`` (their numpy
arrays, no copy) work with them. Tensors, ``device``/``pin_memory`` and the
DataLoader integration need ``pip install 'segpipe[torch]'``, the Ultralytics
trainer ``'segpipe[ultralytics]'``; used without, they raise an ImportError
that names the extra. Where torch is not installed nothing imports it; where
it is, the stream classes are torch IterableDatasets (a DataLoader takes
them), so importing Loader or FlightBatches imports torch.
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
    "numpy_batch",
    "parse_app_metadata",
    "rank_and_world",
]


def __getattr__(name):
    # The classes need pyarrow (and numpy): import them on first use only,
    # so that the pure parts work on machines without them.
    if name == "FlightBatches":
        try:
            from .flight import FlightBatches
        except ModuleNotFoundError as e:
            if e.name != "torch":
                raise
            from ._torch import TORCH_EXTRA, missing

            raise missing("segpipe.FlightBatches", "torch", TORCH_EXTRA) from e
        return FlightBatches
    if name == "numpy_batch":
        from .batch import numpy_batch

        return numpy_batch
    if name == "Loader":
        from .loader import Loader

        return Loader
    if name == "Batch":
        from .batch import Batch

        return Batch
    raise AttributeError(f"module 'segpipe' has no attribute {name!r}")
