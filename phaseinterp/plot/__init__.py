"""Every figure of phaseinterp (plotly; nothing here calls `show()`), and HTML export.

The top floor of the figures: it reads results (curves, maps, gate tables, flips, tables of models) by their
attributes and never imports them; a PhaseCurve or SpecializationMap shown in Jupyter calls
`plot.display` from its `_repr_html_` (the one way down, tests/test_architecture.py).

    >>> from phaseinterp.plot import phase_figure, map_figure, save_html
"""

from typing import TYPE_CHECKING

from phaseinterp._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker reads; at run time each name is imported on first use
    from phaseinterp.plot.attention import (
        attention_figure as attention_figure, attention_view as attention_view, circuitsvis_data as circuitsvis_data)
    from phaseinterp.plot.curves import INTERVALS as INTERVALS, phase_figure as phase_figure
    from phaseinterp.plot.curves import table_figure as table_figure, zoo_figure as zoo_figure
    from phaseinterp.plot.flip import flip_figure as flip_figure
    from phaseinterp.plot.html import PLOTLY_JS as PLOTLY_JS, save_html as save_html
    from phaseinterp.plot.maps import (
        attribution_scatter as attribution_scatter, cycling_figure as cycling_figure,
        gate_attribution_figure as gate_attribution_figure, gate_dynamics_figure as gate_dynamics_figure,
        gate_plane_figure as gate_plane_figure, gate_profile_figure as gate_profile_figure, map_figure as map_figure)
    from phaseinterp.plot.mitigations import memory_figure as memory_figure
    from phaseinterp.plot.pretrained import (
        depth_phase_figure as depth_phase_figure, phase_rows_figure as phase_rows_figure)

_EXPORTS = {
    **dict.fromkeys(("attention_figure", "attention_view", "circuitsvis_data"), "attention"),
    **dict.fromkeys(("INTERVALS", "phase_figure", "table_figure", "zoo_figure"), "curves"),
    **dict.fromkeys(("PLOTLY_JS", "save_html"), "html"),
    **dict.fromkeys(("attribution_scatter", "cycling_figure", "gate_attribution_figure", "gate_dynamics_figure",
                     "gate_plane_figure", "gate_profile_figure", "map_figure"), "maps"),
    **dict.fromkeys(("flip_figure",), "flip"),
    **dict.fromkeys(("memory_figure",), "mitigations"),
    **dict.fromkeys(("depth_phase_figure", "phase_rows_figure"), "pretrained"),
}
__all__ = sorted(_EXPORTS)
if not TYPE_CHECKING:  # a type checker reads the imports above: an unknown name is an error there too
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
