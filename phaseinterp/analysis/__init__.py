"""Analysis of intervention results: specialization maps and gate statistics."""

from phaseinterp.analysis.gate_stats import (checkpoint_step, effective_offsets, entropy, gate_dynamics,
                                             gate_profiles, gate_statistics, gate_weights)
from phaseinterp.analysis.specialization import SpecializationMap, stack_maps

__all__ = ["SpecializationMap", "checkpoint_step", "effective_offsets", "entropy", "gate_dynamics", "gate_profiles",
           "gate_statistics", "gate_weights", "stack_maps"]
