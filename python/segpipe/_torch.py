"""torch and ultralytics, imported where a feature needs them.

The base install (``pip install segpipe``) is pyarrow and numpy: the loader's
Arrow records and their numpy form need nothing else. Tensors, pinned memory,
devices, the DataLoader integration and the Ultralytics trainer come with the
extras, and a feature used without its extra raises an ImportError that
names the pip command, instead of a bare "No module named 'torch'" from
deep inside the package.
"""

from __future__ import annotations

from typing import Any

#: The pip extras, as the ImportErrors name them.
TORCH_EXTRA = "segpipe[torch]"
ULTRALYTICS_EXTRA = "segpipe[ultralytics]"


def missing(feature: str, module: str, extra: str) -> ImportError:
    """The ImportError for feature used where module does not import."""
    return ImportError(f"segpipe: {feature} needs {module}: pip install '{extra}'")


def require(feature: str) -> Any:
    """The torch module, or an ImportError naming feature and the extra."""
    try:
        import torch
    except ImportError as e:
        raise missing(feature, "torch", TORCH_EXTRA) from e
    return torch


def dataset_base() -> type:
    """torch.utils.data.IterableDataset where torch imports (a DataLoader
    accepts the streams), else object: the streams still build requests
    and give Arrow records without it."""
    try:
        from torch.utils.data import IterableDataset
    except ImportError:
        return object
    return IterableDataset
