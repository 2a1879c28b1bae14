# Type stub of phaseinterp/__init__.py, whose names are lazy (PEP 562): a type checker or an IDE reads
# these imports, Python never does. tests/test_typing.py keeps this list equal to `_EXPORTS`.
from phaseinterp.catalog import models as models
from phaseinterp.config import CompressionConfig as CompressionConfig
from phaseinterp.config import ModelConfig as ModelConfig
from phaseinterp.model import HookedCompressedTransformer as HookedCompressedTransformer
from phaseinterp.presets import PRESETS as PRESETS
from phaseinterp.presets import preset as preset
from phaseinterp.sources import load as load
from phaseinterp.units import Unit as Unit
from phaseinterp.units import head_units as head_units

__version__: str
__all__ = ["CompressionConfig", "HookedCompressedTransformer", "ModelConfig", "PRESETS", "Unit", "head_units", "load",
           "models", "preset", "__version__"]
