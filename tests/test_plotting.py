"""Tests of course_lib.plotting: each helper draws what it is given."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_lib import plotting  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_plot_attention_shows_the_weights_and_labels():
    A = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = plotting.plot_attention(A, ["a", "b", "c"], ["w", "x", "y", "z"],
                                  title="weights")
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.images[0].get_array(), A.numpy())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert len(ax.texts) == 12  # small matrices are annotated
    assert ax.get_title() == "weights"


def test_plot_attention_rejects_batches():
    with pytest.raises(ValueError, match=r"one \(N_q, N_k\) matrix"):
        plotting.plot_attention(torch.rand(2, 3, 3))


def test_plot_heads_one_panel_per_head():
    A = torch.softmax(torch.randn(6, 5, 5), dim=-1)
    fig = plotting.plot_heads(A, tokens=list("abcde"))
    drawn = [ax for ax in fig.axes if ax.images]
    assert len(drawn) == 6
    np.testing.assert_allclose(drawn[5].images[0].get_array(), A[5].numpy())
    with pytest.raises(ValueError, match="H, N_q, N_k"):
        plotting.plot_heads(torch.rand(5, 5))


def test_plot_matrix_is_centred_on_zero():
    M = np.array([[-2.0, 1.0], [0.5, 0.0]])
    fig = plotting.plot_matrix(M)
    assert fig.axes[0].images[0].get_clim() == (-2.0, 2.0)


def test_plot_curves_log_axes():
    fig = plotting.plot_curves({"n^2": ([1, 2, 4], [1, 4, 16])},
                               xlabel="N", ylabel="cost", logx=True,
                               logy=True)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1, 4, 16])


def test_table_escapes_aligns_and_formats():
    t = plotting.table(["model", "bits", "params"],
                       [["<b>bpe</b>", 2.60213, 170240],
                        ["chars", "2.798", 96]],
                       caption="a & b", notes=["note <1>"])
    markup = t._repr_html_()
    assert "&lt;b&gt;bpe&lt;/b&gt;" in markup and "<b>bpe" not in markup
    assert "a &amp; b" in markup and "note &lt;1&gt;" in markup
    assert "170,240" in markup and "2.602" in markup
    # numbers right-aligned, names left-aligned; only the table scrolls
    assert '<td style="text-align: right; padding: 0.2em 0.7em">2.798<' in (
        markup)
    assert '<td style="text-align: left; padding: 0.2em 0.7em">chars<' in (
        markup)
    assert 'overflow-x: auto' in markup
    text = str(t).splitlines()
    assert text[0] == "a & b" and text[-1] == "note <1>"
    assert text[2].endswith("170,240") and text[3].endswith("96")


def test_table_rejects_a_row_of_the_wrong_length():
    with pytest.raises(ValueError, match="row 1 has 1 cells; expected 2"):
        plotting.table(["a", "b"], [[1, 2], [3]])
