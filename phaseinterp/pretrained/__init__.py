"""Training-free KV compression of real pretrained models, measured by phase (SmolLM2-135M:
`python -m phaseinterp.pretrained.smollm2`; results in assets/results/smollm2.md)."""

from phaseinterp._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(('SweepRow', 'compression_settings', 'induction_correct', 'layer_screen', 'sweep_row'),
                    "induction_sweep"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
