"""Checks of drawn matplotlib figures shared by the report tests."""

from __future__ import annotations


def assert_every_panel_has_its_legend(figure) -> None:
    """Each drawn panel carries a legend naming its series; a heatmap panel has its colour bar as its key."""
    colour_bars = [axis for axis in figure.axes if axis.get_label() == "<colorbar>"]
    panels = [axis for axis in figure.axes if axis.get_label() != "<colorbar>" and axis.axison]
    assert panels
    for axis in panels:
        if axis.images:
            assert colour_bars and all(bar.get_ylabel() for bar in colour_bars), axis.get_title()
        else:
            legend = axis.get_legend()
            assert legend is not None and [t.get_text() for t in legend.get_texts()], axis.get_title()
