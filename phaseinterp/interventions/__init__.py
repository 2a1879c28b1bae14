"""Causal interventions over phase-stratified batches (see docs/interventions.md).

Knockout maps, activation patching (phase swap / mapping swap pairings), attribution patching
on gates, gate overrides and gate cycling; every intervention removes its hooks and restores
parameters on exit, warns when it changes nothing, and records what made it."""

from phaseinterp.interventions.attribution import GateAttribution, attribution_patching, gate_attribution
from phaseinterp.interventions.calibration import REPLACEMENTS, Calibration, calibrate, calibrate_cached, clear_calibrations
from phaseinterp.interventions.cycling import CyclingResult, cycled_gates, gate_cycling, r_squared
from phaseinterp.interventions.overrides import compressors, gate_override, gate_override_hooks, override_values
from phaseinterp.interventions.knockout import (is_correct, knockout, knockout_edit, knockout_hooks, knockout_logits,
                                                knockout_map)
from phaseinterp.interventions.options import (AttributionOptions, KnockoutOptions, MapOptions, PatchingOptions,
                                               RunOptions)
from phaseinterp.interventions.pairs import Pairing, mapping_swap, phase_swap
from phaseinterp.interventions.patching import activation_patching, logit_diff, top_other
from phaseinterp.interventions.planted import planted_model
from phaseinterp.interventions.runner import final_logits, run_units
from phaseinterp.units import LEVELS, Unit, head_units

REGISTRY = {"knockout": knockout_map, "patching": activation_patching, "gate_attribution": gate_attribution,
            "gate_cycling": gate_cycling}

__all__ = ["LEVELS", "REGISTRY", "REPLACEMENTS", "AttributionOptions", "Calibration", "CyclingResult",
           "GateAttribution", "KnockoutOptions", "MapOptions", "PatchingOptions", "RunOptions",
           "Pairing", "Unit", "activation_patching", "attribution_patching", "calibrate",
           "calibrate_cached", "clear_calibrations", "compressors", "cycled_gates", "final_logits", "gate_attribution", "gate_cycling", "gate_override",
           "gate_override_hooks", "head_units", "is_correct", "knockout", "knockout_edit", "knockout_hooks",
           "knockout_logits", "knockout_map", "logit_diff", "mapping_swap", "override_values", "phase_swap",
           "planted_model", "r_squared", "run_units", "top_other"]
