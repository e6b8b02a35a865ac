"""Tests of course_lib.complexity: counts by hand, fits, measurements."""

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from course_lib.attention import scaled_dot_product_attention
from course_lib.complexity import (
    attention_flops,
    attention_memory_bytes,
    crossover_length,
    decoding_flops,
    fit_power_law,
    machine_description,
    peak_memory_bytes,
    sweep,
    time_call,
)


def test_attention_flops_small_case_by_hand():
    # N = 4 tokens, D = 6 features, H = 2 heads of d_head = 3.
    counts = attention_flops(4, 6, n_heads=2)
    # Q, K, V: each (4, 6) @ (6, 6) is 4 * 6 outputs of 6 mults + 6 adds.
    assert counts["projections"] == 3 * (4 * 6) * (6 + 6) == 864
    # Per head (4, 3) @ (3, 4): 4 * 4 outputs of 3 mults + 3 adds; 2 heads.
    assert counts["scores"] == 2 * (4 * 4) * (3 + 3) == 192
    # Per head (4, 4) @ (4, 3): 4 * 3 outputs of 4 mults + 4 adds; 2 heads.
    assert counts["weighted_sum"] == 2 * (4 * 3) * (4 + 4) == 192
    # (4, 6) @ (6, 6) once more.
    assert counts["output_projection"] == (4 * 6) * (6 + 6) == 288
    assert counts["total"] == 864 + 192 + 192 + 288 == 1536
    assert all(type(v) is int for v in counts.values())


@pytest.mark.parametrize("N, D", [(1, 8), (7, 12), (100, 64), (3, 768)])
def test_attention_flops_closed_form_and_heads(N, D):
    counts = attention_flops(N, D)
    assert counts["projections"] == 6 * N * D**2
    assert counts["scores"] == counts["weighted_sum"] == 2 * N**2 * D
    assert counts["output_projection"] == 2 * N * D**2
    assert counts["total"] == 8 * N * D**2 + 4 * N**2 * D
    for H in (h for h in (2, 3, 4, 8) if D % h == 0):
        assert attention_flops(N, D, n_heads=H) == counts


@pytest.mark.parametrize("D", [1, 4, 64, 512, 768])
def test_crossover_balances_the_two_kinds_of_terms(D):
    n_star = crossover_length(D)
    assert n_star == 2 * D and type(n_star) is int

    def quadratic(c):  # the N^2 D terms
        return c["scores"] + c["weighted_sum"]

    def linear(c):  # the N D^2 terms
        return c["projections"] + c["output_projection"]

    at = attention_flops(n_star, D)
    assert quadratic(at) == linear(at)
    below, above = attention_flops(n_star // 2, D), attention_flops(
        4 * n_star, D)
    if n_star // 2 >= 1:
        assert linear(below) > quadratic(below)
    assert quadratic(above) > linear(above)
    # One token past the crossover the scores take over.
    after = attention_flops(n_star + 1, D)
    assert quadratic(after) > linear(after)


@pytest.mark.parametrize("D, d_ff", [(1, 1), (64, 256), (768, 3072),
                                     (10, 7)])
def test_crossover_with_a_feed_forward_block(D, d_ff):
    n_star = crossover_length(D, d_ff)
    assert n_star == 2 * D + d_ff and type(n_star) is int
    # the FFN's two products, counted by PyTorch, on N = n_star tokens
    ffn = nn.Sequential(nn.Linear(D, d_ff), nn.ReLU(), nn.Linear(d_ff, D))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        ffn(torch.zeros(n_star, D))
    at = attention_flops(n_star, D)
    linear = (at["projections"] + at["output_projection"]
              + counter.get_total_flops())
    assert at["scores"] + at["weighted_sum"] == linear
    assert crossover_length(D, 0) == crossover_length(D) == 2 * D


def _decode_with_cache(mha, prompt, n_new, generator):
    """Run ``mha`` token by token with a KV cache (torch ops only): the
    new token's q, k, v, its key and value appended, attention over the
    cache, W_o. Returns the outputs ``(n_new, D)``."""
    H = mha.n_heads
    D = prompt.shape[-1]
    d = D // H

    def heads(x):  # (L, D) -> (H, L, d)
        return x.reshape(-1, H, d).transpose(0, 1)

    K, V = heads(mha.W_k(prompt)), heads(mha.W_v(prompt))
    outputs = []
    for _ in range(n_new):
        x = torch.randn(1, D, generator=generator)
        q = heads(mha.W_q(x))  # (H, 1, d)
        K = torch.cat([K, heads(mha.W_k(x))], dim=1)  # (H, L, d)
        V = torch.cat([V, heads(mha.W_v(x))], dim=1)
        A = torch.softmax(q @ K.transpose(1, 2) / math.sqrt(d), dim=-1)
        y = (A @ V).transpose(0, 1).reshape(1, D)  # (1, D)
        outputs.append(mha.W_o(y))
    return torch.cat(outputs)


@pytest.mark.parametrize("P, n, D, H", [(0, 1, 4, 1), (0, 5, 6, 2),
                                        (7, 3, 8, 4), (3, 9, 12, 3)])
def test_decoding_flops_counted_by_torch(P, n, D, H):
    from course_lib.multihead import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=D, n_heads=H)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randn(P, D)
    with torch.no_grad():
        prefill = FlopCounterMode(display=False)
        with prefill:  # the prompt's keys and values: not counted
            mha.W_k(prompt), mha.W_v(prompt)
        with FlopCounterMode(display=False) as counter:
            _decode_with_cache(mha, prompt, n, generator)
    assert counter.get_total_flops() - prefill.get_total_flops() == (
        decoding_flops(P, n, D))


def test_decoding_flops_sum_of_steps():
    # one step at length L costs 8 D^2 + 4 L D; the steps add up
    for P, n, D in [(0, 1, 3), (10, 7, 16), (512, 100, 768)]:
        steps = sum(8 * D * D + 4 * L * D for L in range(P + 1, P + n + 1))
        assert decoding_flops(P, n, D) == steps
    assert isinstance(decoding_flops(5, 5, 8), int)
    # generating n tokens after n costs more than generating n from scratch
    assert decoding_flops(100, 100, 64) > decoding_flops(0, 100, 64)


def test_attention_memory_bytes():
    assert attention_memory_bytes(1) == 4
    assert attention_memory_bytes(3) == 9 * 4
    assert attention_memory_bytes(1024, n_heads=8) == 8 * 2**20 * 4
    assert attention_memory_bytes(10, bytes_per_element=8) == 800
    # Matches the weights scaled_dot_product_attention materialises.
    Q = torch.randn(2, 16, 4)
    _, A = scaled_dot_product_attention(Q, Q, Q)
    assert A.numel() * A.element_size() == attention_memory_bytes(
        16, n_heads=2)


def test_fit_power_law_recovers_exact_laws():
    xs = [16, 32, 64, 128, 256]
    for exponent, coefficient in [(2.0, 3.5), (1.0, 0.25), (-0.5, 7.0),
                                  (2.7, 1e-6)]:
        ys = [coefficient * x**exponent for x in xs]
        e, c = fit_power_law(xs, ys)
        assert type(e) is float and type(c) is float
        assert e == pytest.approx(exponent, abs=1e-10)
        assert c == pytest.approx(coefficient, rel=1e-9)


def test_fit_power_law_accepts_arrays_and_tensors():
    xs = np.array([2.0, 4.0, 8.0])
    e, c = fit_power_law(torch.tensor(xs), torch.tensor(5 * xs**2))
    assert (e, c) == pytest.approx((2.0, 5.0))
    e, c = fit_power_law(xs, 5 * xs**2)
    assert (e, c) == pytest.approx((2.0, 5.0))


def test_fit_power_law_with_noise():
    g = np.random.default_rng(0)
    xs = np.geomspace(64, 4096, 12)
    ys = 2e-9 * xs**2 * np.exp(g.normal(0, 0.05, xs.shape))
    e, c = fit_power_law(xs, ys)
    assert e == pytest.approx(2.0, abs=0.05)
    assert c == pytest.approx(2e-9, rel=0.3)


def test_time_call_returns_positive_seconds():
    calls = []
    seconds = time_call(lambda x: calls.append(x), 1, repeats=3, warmup=2)
    assert type(seconds) is float and seconds > 0
    assert len(calls) == 5
    assert time_call(torch.randn, 64, 64, repeats=1, warmup=0) > 0


def test_peak_memory_of_a_square_tensor_grows_as_n_squared():
    small = peak_memory_bytes(torch.ones, 512, 512)
    big = peak_memory_bytes(torch.ones, 1024, 1024)
    assert small >= 512 * 512 * 4
    assert big >= 1024 * 1024 * 4
    assert 3.5 < big / small < 4.5


def test_peak_memory_counts_freed_temporaries():
    def temporaries(n):
        a = torch.ones(n, n)
        b = a * 2  # a and b alive together: 2 n^2 floats
        del a, b
        return torch.ones(n)

    peak = peak_memory_bytes(temporaries, 256)
    assert peak >= 2 * 256 * 256 * 4
    assert peak < 3 * 256 * 256 * 4


def test_peak_memory_of_attention_is_quadratic():
    def run(n):
        Q = torch.randn(n, 16)
        return peak_memory_bytes(scaled_dot_product_attention, Q, Q, Q)

    sizes = [128, 256, 512]
    peaks = [run(n) for n in sizes]
    assert peaks[0] >= attention_memory_bytes(128)
    exponent, _ = fit_power_law(sizes, peaks)
    assert exponent == pytest.approx(2.0, abs=0.1)


def test_sweep_rows():
    def make_call(n):
        X = torch.randn(n, 8)
        return lambda: X @ X.T

    rows = sweep(make_call, [32, 64], flops=lambda n: 2 * n * n * 8,
                 repeats=2, warmup=1)
    assert [r["n"] for r in rows] == [32, 64]
    for r in rows:
        assert set(r) == {"n", "seconds", "peak_bytes", "gflops"}
        assert r["seconds"] > 0 and r["gflops"] > 0
        assert r["peak_bytes"] >= r["n"] ** 2 * 4
        assert r["gflops"] == pytest.approx(
            2 * r["n"] ** 2 * 8 / r["seconds"] / 1e9)
    rows = sweep(make_call, [16], memory=False, repeats=1)
    assert rows[0]["peak_bytes"] is None and rows[0]["gflops"] is None


def test_machine_description():
    text = machine_description()
    assert isinstance(text, str) and torch.__version__ in text
    assert f"{torch.get_num_threads()} threads" in text


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: attention_flops(4, 6, n_heads=4), "not divisible"),
        (lambda: attention_flops(0, 6), "n_tokens must be a positive int"),
        (lambda: attention_flops(4, 6.0), "d_model must be a positive int"),
        (lambda: attention_memory_bytes(4, n_heads=0), "n_heads"),
        (lambda: crossover_length(-1), "d_model"),
        (lambda: crossover_length(4, -1), "d_ff must be an int >= 0"),
        (lambda: crossover_length(4, 2.0), "d_ff"),
        (lambda: decoding_flops(-1, 2, 4), "n_prompt must be an int >= 0"),
        (lambda: decoding_flops(0, 0, 4), "n_new must be a positive int"),
        (lambda: decoding_flops(0, 2, 4.0), "d_model"),
        (lambda: fit_power_law([1, 2], [1, 2, 3]), "same length"),
        (lambda: fit_power_law([1], [1]), "at least 2 points"),
        (lambda: fit_power_law([3, 3], [1, 2]), "at least 2 distinct"),
        (lambda: fit_power_law([1, 0], [1, 2]), "positive"),
        (lambda: fit_power_law([1, 2], [1, -2]), "ys must be"),
        (lambda: fit_power_law([1, math.nan], [1, 2]), "finite"),
        (lambda: fit_power_law([[1, 2]], [[1, 2]]), "1-d"),
        (lambda: time_call(print, repeats=0), "repeats"),
        (lambda: time_call(print, warmup=-1), "non-negative"),
    ],
)
def test_bad_input_is_explained(call, message):
    with pytest.raises(ValueError, match=message):
        call()
