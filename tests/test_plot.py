import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import fastpld  # noqa: E402
from fastpld.plot import epsilon_vs_steps, plot_delta_curve, plot_epsilon_vs_steps  # noqa: E402


def test_plot_delta_curve_band_contains_estimate():
    pld = fastpld.compose(fastpld.PoissonSubsampledGaussian(1.0, 0.05), 50)
    fig, ax = plt.subplots()
    try:
        assert plot_delta_curve(pld, ax) is ax
        assert ax.get_yscale() == "log"
        line = ax.get_lines()[0]
        x, y = line.get_data()
        b = pld.delta(x)
        assert np.all(b.lower <= y * (1 + 1e-12) + 1e-300) and np.all(y <= b.upper * (1 + 1e-12))
        assert x[0] == 0 and x[-1] > 0
        ax2 = plot_delta_curve(pld, epsilons=[0.0, 0.5, 1.0], label="run")
        assert list(ax2.get_lines()[0].get_xdata()) == [0.0, 0.5, 1.0]
        plt.close(ax2.figure)
    finally:
        plt.close(fig)


def test_epsilon_vs_steps_monotone_and_plotted():
    mech = fastpld.Laplace(10.0)
    b = epsilon_vs_steps(mech, [1, 10, 40], 1e-6)
    assert np.all(b.lower <= b.estimate) and np.all(b.estimate <= b.upper)
    assert np.all(np.diff(b.estimate) > 0)
    ax = plot_epsilon_vs_steps(mech, [40, 1, 10], 1e-6, bounds=epsilon_vs_steps(mech, [40, 1, 10], 1e-6))
    try:
        assert list(ax.get_lines()[0].get_xdata()) == [1, 10, 40]
        assert ax.get_xscale() == "log"
    finally:
        plt.close(ax.figure)


def test_plot_bad_input():
    with pytest.raises(ValueError, match="pld"):
        plot_delta_curve("not a pld")
    with pytest.raises(ValueError, match="steps"):
        epsilon_vs_steps(fastpld.Laplace(1.0), [0, 1], 1e-5)
    with pytest.raises(ValueError, match="delta"):
        epsilon_vs_steps(fastpld.Laplace(1.0), [1], 0.0)


def test_delta_axis_stops_at_one_with_one_band_entry_and_the_mechanism_named():
    mech = fastpld.PoissonSubsampledGaussian(1.0, 0.01)
    # (the coupling certificate: its lower band drops to 0)
    pld = fastpld.compose(mech, 1000, eps_error=0.1, method="coupling")
    ax = plot_delta_curve(pld)
    try:
        assert ax.get_ylim()[1] == 1.0
        labels = ax.get_legend_handles_labels()[1]
        assert labels.count("certified band") == 1 and "estimate" in labels
        assert "PoissonSubsampledGaussian" in ax.get_title() and "x 1000" in ax.get_title()
        # the lower band reaches 0 near the delta error at the right end: the figure says why, once
        b = pld.delta(ax.get_lines()[0].get_xdata())
        assert (b.lower <= 0).any()
        notes = [t for t in ax.texts if t.get_gid() == "fastpld-delta-error"]
        assert len(notes) == 1 and "delta error" in notes[0].get_text()
        plot_delta_curve(fastpld.compose(mech, 500, eps_error=0.1), ax)  # a second curve adds no band entry or note
        assert ax.get_legend_handles_labels()[1].count("certified band") == 1
        assert len([t for t in ax.texts if t.get_gid() == "fastpld-delta-error"]) == 1
    finally:
        plt.close(ax.figure)


def test_epsilon_vs_steps_names_the_mechanism():
    mech = fastpld.Laplace(10.0)
    ax = plot_epsilon_vs_steps(mech, [1, 10], 1e-6)
    try:
        assert "Laplace" in ax.get_title()
        assert ax.get_legend_handles_labels()[1].count("certified band") == 1
    finally:
        plt.close(ax.figure)
