"""Import the Ultralytics source the loader baseline uses (8.4.2, vendored
with local additions) from a folder, without installing it: for the device
check (device_check.py) on a GPU host that reaches no package registry. The
tests and CI use Ultralytics installed from PyPI instead.

That copy's nn/tasks.py imports user-added blocks whose own dependencies
(timm, einops, mmcv, seaborn, ...) are not Ultralytics requirements. Each
one that is missing is registered as a placeholder module while ultralytics
imports (and only polars stays importable after): importing names from it
works, using one raises ImportError naming it, so a model that really needs
one fails loudly. Modules Ultralytics itself needs (cv2, yaml, PIL, ...) are
never replaced: their absence is an error that says what to install. Every
placeholder is reported, and the callers print them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types

# Third-party modules the Ultralytics code paths used here need for real.
REQUIRED = ("torch", "numpy", "cv2", "yaml", "PIL", "matplotlib", "psutil", "scipy", "requests", "tqdm", "torchvision")
# polars: Ultralytics reads results.csv with it inside a try (a placeholder
# makes that read return nothing, which it already tolerates).
PRELOAD = ("polars",)


class _Meta(type):
    """Placeholder names: any attribute is another placeholder; calling one
    raises ImportError, except in the two decorator forms registries use at
    import time (``@register`` and ``@REGISTRY.register_module(...)``), which
    hand the decorated function or class back unchanged."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(cls.__module__, f"{cls.__qualname__}.{name}")

    def __call__(cls, *a, **kw):
        if "_placeholder" not in cls.__dict__:
            return super().__call__(*a, **kw)  # a real class derived from a placeholder
        if len(a) == 1 and not kw and isinstance(a[0], (types.FunctionType, type)):
            return a[0]
        if not a:
            return cls
        root = cls.__module__.split(".")[0]
        raise ImportError(f"{cls.__module__}.{cls.__qualname__} is a placeholder: {root} is not installed")


def _placeholder(module: str, qualname: str) -> type:
    t = _Meta(qualname.rsplit(".", 1)[-1], (), {"__module__": module, "_placeholder": True})
    t.__qualname__ = qualname
    return t


def _placeholder_attr(modname: str, name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _placeholder(modname, name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__getattr__ = lambda name, _n=spec.name: _placeholder_attr(_n, name)
        m.__segpipe_placeholder__ = True
        return m

    def exec_module(self, module):
        pass


def _purge(prefix: str) -> None:
    for k in [k for k in sys.modules if k == prefix or k.startswith(prefix + ".")]:
        del sys.modules[k]
    # Each import of ultralytics adds its log handler again.
    logging.getLogger(prefix).handlers.clear()


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_ultralytics(src: str):
    """Import ultralytics from src (a folder holding the ultralytics package,
    or the package folder itself). Returns (module, placeholders)."""
    src = os.path.abspath(src)
    if os.path.isfile(os.path.join(src, "__init__.py")) and os.path.basename(src) == "ultralytics":
        src = os.path.dirname(src)
    if not os.path.isfile(os.path.join(src, "ultralytics", "__init__.py")):
        raise ImportError(f"no ultralytics package under {src}")
    placeholders = [m for m in PRELOAD if not _installed(m)]
    finder = _Finder(placeholders)
    sys.meta_path.insert(0, finder)
    if sys.path[:1] != [src]:
        sys.path.insert(0, src)
    os.environ.setdefault("YOLO_OFFLINE", "true")
    for _ in range(100):
        _purge("ultralytics")
        try:
            mod = importlib.import_module("ultralytics")
            importlib.import_module("ultralytics.nn.tasks")  # the model zoo with the added blocks
            break
        except ModuleNotFoundError as e:
            root = (e.name or "").split(".")[0]
            if root in REQUIRED:
                raise ImportError(
                    f"Ultralytics needs {root}, which this Python ({sys.executable}) lacks; on Debian: apt-get install "
                    "python3-opencv python3-yaml python3-pil python3-matplotlib python3-psutil python3-scipy "
                    "python3-requests python3-tqdm python3-torchvision"
                ) from e
            if not root or root == "ultralytics" or root in finder.roots:
                raise
            finder.roots.add(root)
            placeholders.append(root)
    else:
        raise ImportError(f"ultralytics under {src} still fails to import after placeholders for {placeholders}")
    # The modules that imported names from a placeholder keep them; nothing
    # else may find one later: libraries probe sys.modules for optional
    # modules (matplotlib for IPython) and would take a placeholder for the
    # real thing. Only the preloaded ones stay importable.
    found = set(placeholders) - set(PRELOAD)
    finder.roots -= found
    for k in [k for k, m in sys.modules.items() if k.split(".")[0] in found and getattr(m, "__segpipe_placeholder__", False)]:
        del sys.modules[k]
    if not os.path.abspath(mod.__file__).startswith(src + os.sep):
        raise ImportError(f"imported {mod.__file__}, not the copy under {src}")
    return mod, placeholders
