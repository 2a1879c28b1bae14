"""The idealized retrieval model of the paper's mechanism (docs/paper.md, "Theory") as a simulator.

Modules, in reading order: `config` (validated configs), `task` (embeddings, contexts, queries),
`model` (log-linear gates, compressed attention, cross-entropy), `optimum` (exact static-rule
loss at eps = 0, Theorem 1), `flow` (gradient-flow integrators), `diagnostics` (one-hot-ness,
static concentration, coverage, per-phase accuracy), `experiments` (the four experiments),
`figures` (plotly builders). See docs/theory.md.

Example:
    >>> from phaseinterp.theory import TheoryConfig, FlowConfig, integrate, evaluate
    >>> cfg, flow = TheoryConfig(N=64), FlowConfig(n_steps=50)
    >>> res = integrate(cfg, flow, seeds=[0, 1])
    >>> bool(evaluate(res.theta, cfg, flow, res.seeds).seeds["coverage"].between(0, 1).all())
    True
"""

from typing import TYPE_CHECKING

from phaseinterp._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker reads; at run time each name is imported on first use
    from phaseinterp.theory.config import FlowConfig as FlowConfig, TheoryConfig as TheoryConfig
    from phaseinterp.theory.diagnostics import (
        Evaluation as Evaluation, best_coverage as best_coverage, evaluate as evaluate,
        expected_random_coverage as expected_random_coverage, gate_stats as gate_stats, head_table as head_table,
        phase_accuracy as phase_accuracy)
    from phaseinterp.theory.experiments import (
        Experiment as Experiment, run_optimum as run_optimum, run_seeds as run_seeds, run_sweep as run_sweep,
        run_trajectory as run_trajectory)
    from phaseinterp.theory.flow import (
        FlowResult as FlowResult, flow_field as flow_field, init_table as init_table, integrate as integrate)
    from phaseinterp.theory.model import (
        candidate_logits as candidate_logits, gate_probs as gate_probs, gate_table as gate_table,
        gated_loss as gated_loss, query_losses as query_losses, static_loss_mc as static_loss_mc)
    from phaseinterp.theory.optimum import (
        exact_static_loss as exact_static_loss, optimize_static_rules as optimize_static_rules,
        static_rule_survey as static_rule_survey, theorem1_loss as theorem1_loss, theorem1_rules as theorem1_rules)
    from phaseinterp.theory.task import (
        RunData as RunData, build_runs as build_runs, make_embeddings as make_embeddings,
        near_equiangular_gram as near_equiangular_gram, sample_contexts as sample_contexts)

_EXPORTS = {
    **dict.fromkeys(('FlowConfig', 'TheoryConfig'), "config"),
    **dict.fromkeys(('Evaluation', 'best_coverage', 'evaluate', 'expected_random_coverage', 'gate_stats', 'head_table', 'phase_accuracy'), "diagnostics"),
    **dict.fromkeys(('Experiment', 'run_optimum', 'run_seeds', 'run_sweep', 'run_trajectory'), "experiments"),
    **dict.fromkeys(('FlowResult', 'flow_field', 'init_table', 'integrate'), "flow"),
    **dict.fromkeys(('candidate_logits', 'gate_probs', 'gate_table', 'gated_loss', 'query_losses', 'static_loss_mc'), "model"),
    **dict.fromkeys(('exact_static_loss', 'optimize_static_rules', 'static_rule_survey', 'theorem1_loss', 'theorem1_rules'), "optimum"),
    **dict.fromkeys(('RunData', 'build_runs', 'make_embeddings', 'near_equiangular_gram', 'sample_contexts'), "task"),
}
__all__ = sorted(_EXPORTS)
if not TYPE_CHECKING:  # a type checker reads the imports above: an unknown name is an error there too
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
