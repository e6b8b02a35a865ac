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
    # less the largest (the same softmax), divided by the temperature
    torch.testing.assert_close(gen.filter_logits(logits, temperature=2.0),
                               (logits - logits.max()) / 2)
    kept = gen.filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    # the nucleus: the fewest symbols whose mass reaches top_p (a top_p
    # equal to a partial sum, 0.75 here, is at the mercy of rounding)
    for top_p, count in [(0.5, 1), (0.6, 2), (0.7499, 2), (0.7501, 3),
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


def warped(logits, top_k=None, top_p=None):
    """Hugging Face's warpers on ``logits (B, V)``: what is kept."""
    hf = pytest.importorskip("transformers.generation.logits_process")
    ids = torch.zeros(logits.shape[0], 1, dtype=torch.long)
    if top_k is not None:
        logits = hf.TopKLogitsWarper(top_k)(ids, logits)
    if top_p is not None and top_p < 1:  # generate adds none at top_p = 1
        logits = hf.TopPLogitsWarper(top_p)(ids, logits)
    return logits.isfinite()


def test_filter_logits_keeps_what_hugging_faces_warpers_keep():
    """Random logits without ties, in float64 so that Hugging Face's
    cumulative sums hold (ours are float64 whatever the dtype): the same
    symbols kept in every case but those whose cumulative mass lies
    within 1e-6 of the threshold (float32 logits move it that much)."""
    g = torch.Generator().manual_seed(0)
    compared = 0
    for case in range(600):
        V = int(torch.randint(2, 60, (), generator=g))
        scale = [0.1, 1.0, 5.0, 20.0][case % 4]
        logits = torch.randn(3, V, generator=g, dtype=torch.float64) * scale
        top_k = [None, 1, 3, 100][case % 7 % 4]
        top_p = [None, 0.1, 0.5, 0.9, 0.99, 1.0][case % 6]
        probs = (logits if top_k is None else gen.filter_logits(
            logits, top_k=top_k)).softmax(-1).sort(-1).values.cumsum(-1)
        if top_p is not None and top_p < 1 and bool(
                ((probs - (1 - top_p)).abs() < 1e-6).any()):
            continue
        for dtype in (torch.float32, torch.float64):
            ours = gen.filter_logits(logits.to(dtype), top_k=top_k,
                                     top_p=top_p).isfinite()
            assert torch.equal(ours, warped(logits, top_k, top_p)), (
                case, top_k, top_p, dtype)
        compared += 1
    assert compared > 570


def test_top_p_of_one_keeps_every_symbol(dtype):
    """A sum of float32 probabilities reaches 1 before its end; top_p = 1
    keeps every symbol all the same, and a top_p just below 1 keeps all
    but the symbols whose mass is below 1 - top_p."""
    logits = torch.tensor([[20.0, 0.0, 0.0, -1.0]], dtype=dtype)
    assert bool(gen.filter_logits(logits, top_p=1.0).isfinite().all())
    g = torch.Generator().manual_seed(1)
    many = torch.randn(400, 50, generator=g).to(dtype) * 8
    assert bool(gen.filter_logits(many, top_p=1.0).isfinite().all())
    p = torch.tensor([[0.6, 0.3, 0.09995, 0.00005]], dtype=torch.float64)
    for top_p, last in [(0.9999, False), (0.99996, True)]:
        kept = gen.filter_logits(p.log().to(dtype), top_p=top_p)
        assert kept.isfinite().tolist() == [[True, True, True, last]]


def test_one_tie_rule_for_filter_logits_and_sample_top_k(dtype):
    """Every tie of the k-th largest logit stays, in both; ties at the
    edge of the nucleus stay together."""
    tied = torch.tensor([[1.0, 2.0, 2.0, 0.0, 2.0]], dtype=dtype)
    for k in (1, 2, 3):
        kept = gen.filter_logits(tied, top_k=k).isfinite()
        probs, _ = gen.sample_top_k(tied, 1.0, k, 4, seed=0)
        assert kept.tolist() == [[False, True, True, False, True]], k
        assert torch.equal(probs > 0, kept), k
        torch.testing.assert_close(
            probs, torch.tensor([[0, 1, 1, 0, 1]], dtype=dtype) / 3)
    assert int(gen.filter_logits(tied, top_k=4).isfinite().sum()) == 4
    # three symbols of 0.25 and two of 0.125: the nucleus of 0.3 holds
    # the first two tied ones, so their third tie too
    p = torch.tensor([[0.25, 0.125, 0.25, 0.125, 0.25]], dtype=dtype)
    assert gen.filter_logits(p.log(), top_p=0.3).isfinite().tolist() == [
        [True, False, True, False, True]]


def test_a_vanishing_temperature_is_greedy(dtype):
    """1e-40 is below float32's smallest normal number: dividing the
    logits by it overflows, and the draw is the argmax (a uniform draw
    among tied largest logits), as at temperature 0."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(50, V, generator=g).to(dtype)
    for t in (1e-40, 1e-300, 1e-6):
        draws = gen.sample_next_token(logits, temperature=t, generator=g,
                                      top_k=5, top_p=0.9)
        assert torch.equal(draws, logits.argmax(-1)), t
        probs, samples = gen.sample_top_k(logits, t, None, 7, seed=0)
        assert torch.equal(samples, logits.argmax(-1, keepdim=True)
                           .expand(-1, 7)), t
        assert bool(probs.isfinite().all())
    tied = torch.tensor([[0.0, 3.0, 3.0]], dtype=dtype).expand(2000, 3)
    draws = gen.sample_next_token(tied, temperature=1e-40, generator=g)
    share = float((draws == 1).double().mean())
    assert set(draws.tolist()) == {1, 2} and 0.45 < share < 0.55


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

