"""Analysis of intervention results: gate statistics, and the specialization maps of
`phaseinterp.measure.specialization` (re-exported here: interventions build them)."""

from phaseinterp.analysis.attention import pattern_by_token, spread_pattern
from phaseinterp.analysis.gate_stats import (checkpoint_step, effective_offsets, entropy, gate_dynamics,
                                             gate_profiles, gate_statistics, gate_weights)
from phaseinterp.measure.specialization import SpecializationMap, stack_maps

__all__ = ["SpecializationMap", "checkpoint_step", "effective_offsets", "entropy", "gate_dynamics", "gate_profiles",
           "gate_statistics", "gate_weights", "pattern_by_token", "spread_pattern", "stack_maps"]
