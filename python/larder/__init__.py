"""larder: training data staged next to the GPUs that read it.

A thin layer over liblarder (loaded with ctypes; the GIL is released
during every call into it):

    larder.Dataset     map-style access to a packed dataset: ds[i] -> fields
    larder.Plan        the deterministic, resumable sample order
    larder.open        a seekable binary file over one sample or field, for
                       torch.load, numpy.load, h5py.File, PIL.Image.open
    larder.publish     publish a directory's files under a name (resolve,
                       lookup, names: find them on any node)
    larder.LarderError what a failing liblarder call raises
    larder.hint        stage and pin samples on the node daemons (a TTL);
                       larder.replicate, larder.hints (what is pinned)
    larder.mount       tell a `larder mount` the order a rank reads a mounted
                       HDF5 file in (register_order, order_status)
    larder.torch       IterableDataset and DataLoader for PyTorch, and
                       MountOrderSampler (imports torch; `import larder`
                       alone does not)

docs/python.md has examples.
"""

from ._lib import (
    ECACHE,
    EDENIED,
    ELOCAL,
    EPROTOCOL,
    EBADINDEX,
    EBADTAR,
    ECHECKSUM,
    EDUPKEY,
    EEMPTY,
    EHDF5,
    EHTTP,
    ENOTFOUND,
    ETOOSMALL,
    ETRUNCATED,
    EUNSAFE,
    EUNSUPPORTED,
    EUSAGE,
    EVERSION,
    LarderError,
    library_path,
    strerror,
)
from .dataset import Dataset, DatasetInfo, Field, SampleInfo
from .file import LarderFile, open
from .plan import Plan, PlanInfo
from .hint import HintResult, hint, hints, replicate
from .names import Publication, lookup, names, publish, resolve
from .stats import summarize
from . import transform  # transforms next to the data (docs/transforms.md)
from . import mount  # orders for `larder mount` (docs/python.md)

from . import _lib

# the loaded liblarder's version (LARDER_VERSION_STRING of include/larder.h,
# the one place it is written); an installed package ships its own library
__version__ = _lib.lib.larder_version().decode()

__all__ = [
    "EBADINDEX", "EVERSION", "EBADTAR", "ECHECKSUM", "ENOTFOUND", "EDUPKEY", "EUNSAFE",
    "ETRUNCATED", "EHDF5", "EHTTP", "EEMPTY", "ETOOSMALL", "EUSAGE", "EUNSUPPORTED", "ECACHE",
    "EPROTOCOL", "EDENIED", "ELOCAL",
    "Dataset",
    "DatasetInfo",
    "Field",
    "HintResult",
    "LarderError",
    "LarderFile",
    "Plan",
    "PlanInfo",
    "Publication",
    "SampleInfo",
    "library_path",
    "open",
    "lookup",
    "names",
    "publish",
    "resolve",
    "strerror",
    "summarize",
    "hint",
    "hints",
    "replicate",
]
