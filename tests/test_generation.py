"""Tests for course_lib.generation: the sampling rules, one cached
attention step against full causal attention, the KV cache against
recomputation (token for token) and bad input."""

import pytest
import torch

from course_lib import generation as gen
from course_lib.attention import causal_mask
from course_lib.language_model import LanguageModel
from course_lib.multihead import multi_head_attention

V = 13


def model(dtype=torch.float32, seed=0, **options):
    torch.manual_seed(seed)
    init = dict(vocab_size=V, max_len=64, d_model=16, n_heads=2, d_ff=32,
                n_layers=2)
    init.update(options)
    return LanguageModel(**init).to(dtype).eval()


def prompts(count, seed, low=1, high=9):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (count,), generator=g)
    return [torch.randint(V, (int(n),), generator=g) for n in lengths]


# ----------------------------------------------------------- sampling


def test_filter_logits_temperature_top_k_top_p(dtype):
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]], dtype=dtype))
    torch.testing.assert_close(gen.filter_logits(logits, temperature=2.0),
                               logits / 2)
    kept = gen.filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    # the nucleus: the fewest symbols whose mass reaches top_p
    for top_p, count in [(0.5, 1), (0.6, 2), (0.75, 2), (0.76, 3),
                         (1.0, 4)]:
        z = gen.filter_logits(logits, top_p=top_p)
        assert int(z.isfinite().sum()) == count, top_p
    # the order of the vocabulary does not matter
    shuffled = logits[:, [2, 0, 3, 1]]
    z = gen.filter_logits(shuffled, top_p=0.6)
    assert z.isfinite().tolist() == [[False, True, False, True]]
    # ties with the k-th largest are kept
    tied = torch.tensor([1.0, 2.0, 2.0, 0.0], dtype=dtype)
    assert int(gen.filter_logits(tied, top_k=2).isfinite().sum()) == 2
    assert int(gen.filter_logits(tied, top_k=1).isfinite().sum()) == 2


def test_sampling_follows_the_distribution_and_the_generator():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -3.0])
    draws = gen.sample_next_token(logits.expand(20000, 5),
                                  generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5) / 20000
    torch.testing.assert_close(freq, logits.softmax(-1), atol=0.015,
                               rtol=0)
    again = gen.sample_next_token(logits.expand(20000, 5),
                                  generator=torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    # top-k never draws outside the k largest; greedy is the argmax
    topk = gen.sample_next_token(logits.expand(5000, 5), top_k=2,
                                 generator=torch.Generator().manual_seed(1))
    assert set(topk.tolist()) == {0, 1}
    assert gen.sample_next_token(torch.randn(3, 4, V),
                                 temperature=0).shape == (3, 4)
    x = torch.randn(6, V)
    assert torch.equal(gen.sample_next_token(x, temperature=0),
                       x.argmax(-1))
    # a low temperature concentrates the draws on the argmax
    cold = gen.sample_next_token(logits.expand(2000, 5), temperature=0.1,
                                 generator=torch.Generator().manual_seed(2))
    assert float((cold == 0).double().mean()) > 0.99


# ----------------------------------------------- one cached attention step


@pytest.mark.parametrize("n_cached, n_new", [(0, 5), (4, 1), (3, 3)])
def test_kv_attention_step_matches_full_causal_attention(dtype, tol,
                                                         n_cached, n_new):
    D, H, N = 8, 2, n_cached + n_new
    g = torch.Generator().manual_seed(n_cached)
    X = torch.randn(2, N, D, generator=g, dtype=dtype)
    W = [torch.randn(D, D, generator=g, dtype=dtype) / D ** 0.5
         for _ in range(4)]
    full, _ = multi_head_attention(X, *W, H, mask=causal_mask(N))
    d = D // H
    K_all = (X @ W[1]).reshape(2, N, H, d).transpose(1, 2)
    V_all = (X @ W[2]).reshape(2, N, H, d).transpose(1, 2)
    Y, K, Vs = gen.kv_attention_step(
        X[:, n_cached:], K_all[:, :, :n_cached], V_all[:, :, :n_cached],
        *W, H)
    torch.testing.assert_close(Y, full[:, n_cached:], **tol)
    torch.testing.assert_close(K, K_all, **tol)
    torch.testing.assert_close(Vs, V_all, **tol)
    assert Y.dtype == dtype


# ------------------------------------------------------------ the cache


def test_cached_forward_matches_the_full_forward(dtype, tol):
    m = model(dtype)
    tokens = torch.randint(V, (3, 10))
    with torch.no_grad():
        full = m(tokens)
        cache = gen.KVCache.for_model(m, batch_size=3, capacity=2)
        parts = [gen.cached_forward(m, tokens[:, :4], cache),
                 gen.cached_forward(m, tokens[:, 4:5], cache),
                 gen.cached_forward(m, tokens[:, 5:], cache)]
    torch.testing.assert_close(torch.cat(parts, 1), full, **tol)
    # capacity 2 -> 4 (4 tokens) -> 8 (5 tokens) -> 16 (10 tokens)
    assert cache.length == 10 and cache.allocations == 4
    assert cache.capacity == 16
    assert cache.nbytes() == gen.kv_cache_bytes(
        n_layers=2, batch_size=3, n_tokens=16, d_model=16,
        bytes_per_element=dtype.itemsize)


@pytest.mark.parametrize("dtype, draw", [
    (torch.float32, dict(temperature=0)),
    (torch.float64, dict(temperature=0)),
    (torch.float32, dict(temperature=1.0)),
    (torch.float32, dict(temperature=0.7, top_k=4)),
    (torch.float64, dict(temperature=1.3, top_p=0.8))])
def test_the_cache_is_token_identical_to_recomputation(dtype, draw):
    """Twelve prompts of lengths 1 to 8 in one left-padded batch, a cache
    of 3 slots that must grow past its first allocation."""
    m = model(dtype, seed=5)
    batch = prompts(12, seed=6)
    assert len({len(p) for p in batch}) > 3
    seed = 7

    def run(**options):
        g = torch.Generator().manual_seed(seed)
        return gen.generate(m, batch, max_new_tokens=20, generator=g,
                            **draw, **options)

    cached, recomputed = run(capacity=3), run(use_cache=False)
    for c, r, p in zip(cached, recomputed, batch, strict=True):
        assert torch.equal(c, r)
        assert torch.equal(c[:len(p)], p) and len(c) == len(p) + 20


def test_a_batch_generates_what_each_prompt_generates_alone():
    m = model(torch.float64, seed=8)
    batch = prompts(6, seed=9)
    together = gen.generate(m, batch, max_new_tokens=12, temperature=0)
    for p, t in zip(batch, together, strict=True):
        alone = gen.generate(m, [p], max_new_tokens=12, temperature=0)[0]
        assert torch.equal(alone, t)


def test_the_same_seed_gives_the_same_sample():
    m = model()
    batch = prompts(3, seed=10)

    def sample(seed):
        return gen.generate(m, batch, max_new_tokens=15, temperature=1.0,
                            generator=torch.Generator().manual_seed(seed))

    a, b, c = sample(1), sample(1), sample(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_a_subclass_that_passes_the_cache_on_is_cached():
    """The cache is a path through the modules' own forward: a user's
    subclass runs, cached or not, and the two generate the same tokens;
    one that drops the cache keyword is refused with a clear error."""
    from course_lib.multihead import MultiHeadAttention

    class Louder(MultiHeadAttention):
        def forward(self, X, mask=None, **kwargs):
            Y, A = super().forward(X, mask, **kwargs)
            return 2 * Y, A

    class Deaf(MultiHeadAttention):
        def forward(self, X, mask=None, **kwargs):
            return super().forward(X, mask)

    m = model(seed=3)
    plain = gen.generate(m, prompts(4, seed=4), max_new_tokens=8,
                         temperature=0)
    louder = Louder(d_model=16, n_heads=2)
    louder.load_state_dict(m.encoder.layers[1].attention.state_dict())
    m.encoder.layers[1].attention = louder
    runs = [gen.generate(m, prompts(4, seed=4), max_new_tokens=8,
                         temperature=0, use_cache=c) for c in (True, False)]
    assert all(map(torch.equal, *runs))
    assert not all(map(torch.equal, runs[0], plain))  # Louder ran
    m.encoder.layers[1].attention = Deaf(d_model=16, n_heads=2)
    with pytest.raises(ValueError, match="did not pass the KV cache on"):
        gen.generate(m, [torch.tensor([1, 2])], max_new_tokens=3)
    assert len(gen.generate(m, [torch.tensor([1, 2])], max_new_tokens=3,
                            use_cache=False)[0]) == 5


def test_left_pad():
    tokens, valid = gen.left_pad([torch.tensor([5, 6]), torch.tensor([7])])
    assert tokens.tolist() == [[5, 6], [0, 7]]
    assert valid.tolist() == [[True, True], [False, True]]


def test_bad_input():
    m = model()
    with pytest.raises(ValueError, match="exceed max_len = 64"):
        gen.generate(m, [torch.tensor([1, 2])], max_new_tokens=63)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        gen.filter_logits(torch.zeros(3), temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        gen.filter_logits(torch.zeros(3), top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        gen.filter_logits(torch.zeros(3), top_k=0)
    with pytest.raises(ValueError, match="non-empty 1-d"):
        gen.left_pad([torch.tensor([], dtype=torch.long)])
    with pytest.raises(ValueError, match="d_head = 4"):
        gen.kv_attention_step(torch.zeros(1, 2, 8), torch.zeros(1, 2, 3, 3),
                              torch.zeros(1, 2, 3, 3),
                              *[torch.zeros(8, 8)] * 4, 2)
    with pytest.raises(ValueError, match="not divisible"):
        gen.kv_attention_step(torch.zeros(1, 2, 8), torch.zeros(1, 3, 0, 2),
                              torch.zeros(1, 3, 0, 2),
                              *[torch.zeros(8, 8)] * 4, 3)

