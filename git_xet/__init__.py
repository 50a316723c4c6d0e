"""git-xet: the XET content-addressable storage protocol as a Git LFS custom transfer agent,
and a small Python API over the same stores:

    import git_xet

    with git_xet.open_store("/shared/xet-store") as store:   # or https://..., s3://BUCKET/PREFIX
        [up] = store.upload(["model.safetensors"])            # file_hex, sha256_hex, size, new_bytes
        store.download(up.file_hex, "copy.safetensors", sha256_hex=up.sha256_hex)
    git_xet.hash_file("model.safetensors")                   # the same hashes, nothing uploaded

Every error raised is a `git_xet.XetError`; a store that refuses or fails an operation raises a
`git_xet.TransferError` subclass (NotFoundError, RejectedError, ...), whichever kind of store.

Importing this package is cheap: the names below are imported on first use (module
`__getattr__`), so `import git_xet` loads neither the HTTP client, the hashing code nor the server, and
the transfer agent that git-lfs starts eight times per command pays nothing for this API.
XetError (core/errors.py) and `__version__` (version.py) are among those names: this module
defines nothing of its own, so reading it costs the agent one small module and no more.
"""

# Public name -> the module that defines it (imported on first access).
_LAZY = {
    "__version__": ".version",
    "XetError": ".core.errors",
    "open_store": ".pipelines.store_api",
    "Store": ".pipelines.store_api",
    "hash_file": ".pipelines.store_api",
    "HashedFile": ".pipelines.store_api",
    "UploadedFile": ".pipelines.upload",
    "DownloadResult": ".pipelines.download",
    "LocationError": ".client.location",
    "TransferError": ".client.errors",
    "NotFoundError": ".client.errors",
    "RangeNotSatisfiableError": ".client.errors",
    "RejectedError": ".client.errors",
    "MissingXorbsError": ".client.errors",
    "ConflictError": ".client.errors",
    "StoreDamagedError": ".client.errors",
    "StoreUnavailableError": ".client.errors",
    "StoreFullError": ".client.errors",
    "IntegrityError": ".pipelines.download",
}

__all__ = [  # the names of _LAZY (tests/integration/test_public_api.py checks they agree)
    "ConflictError",
    "DownloadResult",
    "HashedFile",
    "IntegrityError",
    "LocationError",
    "MissingXorbsError",
    "NotFoundError",
    "RangeNotSatisfiableError",
    "RejectedError",
    "Store",
    "StoreDamagedError",
    "StoreFullError",
    "StoreUnavailableError",
    "TransferError",
    "UploadedFile",
    "XetError",
    "__version__",
    "hash_file",
    "open_store",
]

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms, and the agent imports this package
if TYPE_CHECKING:
    from .pipelines.store_api import HashedFile, Store, hash_file, open_store
    from .client.errors import (
        ConflictError,
        MissingXorbsError,
        NotFoundError,
        RangeNotSatisfiableError,
        RejectedError,
        StoreDamagedError,
        StoreFullError,
        StoreUnavailableError,
        TransferError,
    )
    from .client.location import LocationError
    from .core.errors import XetError
    from .pipelines.download import DownloadResult, IntegrityError
    from .pipelines.upload import UploadedFile
    from .version import __version__


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'git_xet' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
