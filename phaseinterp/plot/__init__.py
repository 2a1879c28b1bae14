"""Every figure of phaseinterp (plotly; nothing here calls `show()`), and HTML export.

The top floor of the figures: it reads results (curves, maps, gate tables, flips, the zoo) and
never the other way round; data objects do not draw themselves.

    >>> from phaseinterp.plot import phase_figure, map_figure, save_html
"""

from phaseinterp._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("INTERVALS", "phase_figure", "zoo_figure"), "curves"),
    **dict.fromkeys(("PLOTLY_JS", "save_html"), "html"),
    **dict.fromkeys(("attribution_scatter", "cycling_figure", "gate_attribution_figure", "gate_dynamics_figure",
                     "gate_plane_figure", "gate_profile_figure", "map_figure"), "maps"),
    **dict.fromkeys(("flip_figure",), "flip"),
    **dict.fromkeys(("memory_figure",), "mitigations"),
    **dict.fromkeys(("phase_rows_figure",), "pretrained"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
