"""Measurement: phase sweeps and honest statistics (see docs/statistics.md)."""

from phaseinterp.measure.component import PeriodComponent, period_component
from phaseinterp.measure.curve import PhaseCurve
from phaseinterp.measure.depth_grid import DepthPhaseGrid, depth_phase_grid
from phaseinterp.measure.oracle import induction_oracle
from phaseinterp.measure.intervals import cluster_bootstrap, percentile_interval, wilson_interval
from phaseinterp.measure.periodicity import (dominant_period, period_baseline, period_share, periodicity_gap,
                                             power_spectrum)
from phaseinterp.measure.permutation import permutation_test
from phaseinterp.measure.pvalues import bh_adjust, bootstrap_p_value, holm_adjust, min_n_boot
from phaseinterp.measure.seeds import (MemberCurve, MemberSummary, SeedRun, SeedSpread, correct_matrix, estimate_text,
                                       median_range_text, member_curve, member_summary, pack_correct, unpack_correct)
from phaseinterp.measure.specialization import SpecializationMap, stack_maps
from phaseinterp.measure.sweep import evaluate_correct, forward_logits, model_period, phase_sweep

__all__ = ["DepthPhaseGrid", "MemberCurve", "MemberSummary", "PeriodComponent", "PhaseCurve", "SeedRun", "SeedSpread", "bh_adjust",
           "bootstrap_p_value", "cluster_bootstrap", "correct_matrix", "depth_phase_grid", "dominant_period", "estimate_text",
           "evaluate_correct", "forward_logits", "holm_adjust", "induction_oracle", "median_range_text", "member_curve",
           "member_summary", "min_n_boot", "model_period", "pack_correct", "percentile_interval", "period_baseline",
           "period_component", "period_share", "periodicity_gap", "permutation_test", "phase_sweep", "power_spectrum",
           "SpecializationMap", "stack_maps", "unpack_correct", "wilson_interval"]
