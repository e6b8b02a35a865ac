"""Tests for course_lib.llama and course_lib.norms: against Hugging Face
transformers' Llama (built from a small random config, nothing
downloaded) with copied weights in float64, grouped-query attention
against chapter 3's function, the KV cache through the modules' forward,
and bad input."""

import pytest
import torch

from course_lib import generation as gen
from course_lib import llama
from course_lib.kv_cache import KVCache, kv_cache_bytes
from course_lib.multihead import grouped_query_attention
from course_lib.norms import RMSNorm, rms_norm

transformers = pytest.importorskip("transformers")
modeling = pytest.importorskip("transformers.models.llama.modeling_llama")


def config(**options):
    init = dict(vocab_size=37, hidden_size=32, intermediate_size=48,
                num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64,
                rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default",
                                 "rope_theta": 500.0},
                attn_implementation="sdpa")
    init.update(options)
    return transformers.LlamaConfig(**init)


def hf_model(seed=0, **options):
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config(**options)).double().eval()


def _float64_norm(self, hidden):
    # Hugging Face's RMSNorm computed in the input's dtype (theirs casts
    # to float32, which would cap the agreement at about 1e-7)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden * torch.rsqrt(variance
                                               + self.variance_epsilon))


def _float64_rotary(self, x, position_ids):
    # their angles with frequencies and products in float64
    cfg = self.config
    d = cfg.hidden_size // cfg.num_attention_heads
    theta = cfg.rope_parameters["rope_theta"]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2).double() / d)
    freqs = position_ids[..., None].double() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


@pytest.fixture(params=["float64 throughout", "as shipped"])
def exact(request, monkeypatch):
    """Hugging Face computes norms and rotation angles in float32 even in a
    float64 model (and its eager attention the softmax: we ask for sdpa):
    with those made float64 the two agree to 1e-12; as shipped, to the
    float32 rounding of those steps."""
    if request.param == "float64 throughout":
        monkeypatch.setattr(modeling.LlamaRMSNorm, "forward", _float64_norm)
        monkeypatch.setattr(modeling.LlamaRotaryEmbedding, "forward",
                            _float64_rotary)
        return dict(atol=1e-12, rtol=1e-10)
    return dict(atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_decoder_layer_equals_hugging_face(exact, kv_heads):
    hf = hf_model(num_key_value_heads=kv_heads)
    layer, cfg = hf.model.layers[0], hf.config
    ours = llama.from_transformers((layer, cfg))
    B, N = 2, 7
    X = torch.randn(B, N, 32, dtype=torch.float64)
    # positions at an offset, as a cached step sees them
    positions = torch.arange(5, 5 + N).expand(B, N)
    cos_sin = hf.model.rotary_emb(X, positions)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    additive = torch.zeros(N, N, dtype=torch.float64).masked_fill(
        ~causal, float("-inf"))[None, None]
    with torch.no_grad():
        theirs = layer(X, attention_mask=additive, position_ids=positions,
                       position_embeddings=cos_sin)
        mine = ours(X, causal, positions=positions)
    torch.testing.assert_close(mine, theirs, **exact)


@pytest.mark.parametrize("tied", [False, True])
def test_causal_lm_equals_hugging_face(exact, tied):
    hf = hf_model(seed=1, tie_word_embeddings=tied)
    ours = llama.from_transformers(hf)
    assert (ours.output.weight is ours.token_embedding.weight) == tied
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in hf.parameters())
    tokens = torch.randint(37, (3, 11))
    with torch.no_grad():
        theirs = hf(tokens).logits
        mine = ours(tokens)
    torch.testing.assert_close(mine, theirs, **exact)


def test_greedy_generation_equals_hugging_face():
    hf = hf_model(seed=2)
    ours = llama.from_transformers(hf)
    prompt = torch.randint(37, (1, 5))
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=20, do_sample=False,
                             attention_mask=torch.ones_like(prompt))
    mine = gen.generate(ours, [prompt[0]], max_new_tokens=20,
                        temperature=0)[0]
    assert torch.equal(mine, theirs[0])


# ------------------------------------------------------- our own pieces


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm(dtype):
    x = torch.randn(3, 5, 8, dtype=dtype)
    w = torch.randn(8, dtype=dtype)
    torch.testing.assert_close(rms_norm(x, w, 1e-6), torch.nn.functional
                               .rms_norm(x, (8,), w, 1e-6))
    assert RMSNorm(d_model=8).to(dtype)(x).dtype == dtype
    with pytest.raises(ValueError, match="weight must have shape"):
        rms_norm(x, torch.ones(3, dtype=dtype))


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_gqa_module_equals_the_function_without_rotation(kv_heads):
    torch.manual_seed(0)
    m = llama.GroupedQueryAttention(d_model=16, n_heads=4,
                                    n_kv_heads=kv_heads, theta=None)
    X = torch.randn(2, 6, 16)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    Y, A = m(X, mask)
    W = [lin.weight.T for lin in (m.W_q, m.W_k, m.W_v, m.W_o)]
    Y_ref, A_ref = grouped_query_attention(X, *W, 4, kv_heads, mask)
    torch.testing.assert_close(Y, Y_ref)
    torch.testing.assert_close(A, A_ref)


def small(seed=0, **options):
    torch.manual_seed(seed)
    init = dict(vocab_size=13, max_len=48, d_model=16, n_heads=4,
                n_kv_heads=2, d_ff=24, n_layers=2)
    init.update(options)
    return llama.LlamaModel(**init).eval()


@pytest.mark.parametrize("options", [
    {}, {"n_kv_heads": 1}, {"positions": "learned", "norm": "layer",
                            "feed_forward": "relu", "bias": True},
    {"tie_embeddings": True, "theta": 50.0}])
def test_the_cache_is_token_identical_and_one_head_per_group(options):
    m = small(**options)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(13, (int(n),), generator=g) for n in
               torch.randint(1, 9, (6,), generator=g)]
    runs = [gen.generate(m, prompts, max_new_tokens=16, temperature=0,
                         use_cache=c, capacity=4) for c in (True, False)]
    assert all(map(torch.equal, *runs))
    # the cache holds H_kv heads: H / H_kv times less than multi-head
    cache = KVCache(capacity=20)
    with torch.no_grad():
        full = m(torch.randint(13, (2, 20)))
        cached = gen.cached_forward(m, torch.randint(13, (2, 20)), cache)
    assert full.shape == cached.shape
    H_kv = m.layers[0].attention.n_kv_heads
    assert cache.nbytes() == kv_cache_bytes(
        n_layers=2, batch_size=2, n_tokens=20, d_model=16,
        d_kv=H_kv * 4)
    assert kv_cache_bytes(n_layers=2, batch_size=2, n_tokens=20,
                          d_model=16) == cache.nbytes() * 4 // H_kv


def test_rope_at_offset_positions_in_steps_equals_the_whole():
    m = small(seed=3).double()
    tokens = torch.randint(13, (2, 12))
    with torch.no_grad():
        full = m(tokens)
        cache = KVCache(capacity=3)
        parts = [gen.cached_forward(m, tokens[:, :5], cache),
                 gen.cached_forward(m, tokens[:, 5:6], cache),
                 gen.cached_forward(m, tokens[:, 6:], cache)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-12,
                               rtol=1e-10)


def test_bias_false_everywhere_and_equal_parameters():
    m = small()
    assert not [n for n, _ in m.named_parameters() if "bias" in n]
    relu = small(feed_forward="relu", d_ff=36)
    swiglu = small(feed_forward="swiglu", d_ff=24)
    count = [sum(p.numel() for p in x.parameters()) for x in (relu, swiglu)]
    assert count[0] == count[1]  # 2 * 16 * 36 == 3 * 16 * 24


def test_bad_input():
    with pytest.raises(ValueError, match="n_heads by n_kv_heads"):
        llama.GroupedQueryAttention(d_model=16, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="norm must be"):
        small(norm="batch")
    with pytest.raises(ValueError, match="max_len = 48"):
        small()(torch.zeros(1, 49, dtype=torch.long))


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gqa_rope_step_equals_the_module_with_a_cache(kv_heads, dtype):
    """The explicit cached step (the exercise's reference) against
    GroupedQueryAttention run on the whole sequence."""
    from course_lib.kv_cache import gqa_rope_step

    torch.manual_seed(0)
    m = llama.GroupedQueryAttention(d_model=16, n_heads=4,
                                    n_kv_heads=kv_heads, theta=100.0)
    m.to(dtype)
    X = torch.randn(2, 9, 16, dtype=dtype)
    full = m(X, torch.ones(9, 9, dtype=torch.bool).tril())[0]
    W = [lin.weight.T for lin in (m.W_q, m.W_k, m.W_v, m.W_o)]
    K = torch.zeros(2, kv_heads, 0, 4, dtype=dtype)
    V = K.clone()
    outs = []
    for a, b in ((0, 5), (5, 6), (6, 9)):
        Y, K, V = gqa_rope_step(X[:, a:b], K, V, *W, 4, kv_heads, 100.0)
        outs.append(Y)
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else {}
    torch.testing.assert_close(torch.cat(outs, 1), full, **tol)
    assert K.shape == (2, kv_heads, 9, 4)


def test_the_readme_example_runs(capsys):
    """The README's Llama example (under "Using course_lib in another
    course") runs as written: it trains, and the cache generates what
    recomputation generates."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    examples = re.findall(r"```python\n(.*?)```", readme, re.S)
    source = next(e for e in examples if "LlamaModel(" in e)
    namespace = {}
    exec(compile(source, "README.md", "exec"), namespace)
    run, model, vocab = namespace["run"], namespace["model"], \
        namespace["vocab"]
    assert run["losses"][-1] < run["losses"][0] - 0.5
    prompt = [vocab.encode("The attention ")]
    assert torch.equal(gen.generate(model, prompt, max_new_tokens=40,
                                    temperature=0, use_cache=False)[0],
                       namespace["text"][0])


# ------------------------------------ documented behaviour, PyTorch's way


def test_gqa_and_block_are_causal_unless_told_otherwise():
    """Documented causal, they are: no mask means the causal mask; an
    explicit mask or is_causal=False changes it."""
    torch.manual_seed(0)
    m = llama.GroupedQueryAttention(d_model=16, n_heads=4, n_kv_heads=2)
    block = small().layers[0]
    X = torch.randn(2, 6, 16)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    full = torch.ones(6, 6, dtype=torch.bool)
    Y, A = m(X)
    assert torch.equal(A, m(X, causal)[1])
    assert (A.triu(1) == 0).all()
    # a later token changes no earlier output
    X2 = X.clone()
    X2[:, -1] += 1
    torch.testing.assert_close(m(X2)[0][:, :-1], Y[:, :-1])
    torch.testing.assert_close(block(X2)[:, :-1], block(X)[:, :-1])
    assert torch.equal(block(X), block(X, causal))
    for module, out in ((m, lambda r: r[0]), (block, lambda r: r)):
        torch.testing.assert_close(out(module(X, is_causal=False)),
                                   out(module(X, full)))
        with pytest.raises(ValueError, match="either a mask or"):
            module(X, causal, is_causal=True)
    assert not torch.allclose(m(X, is_causal=False)[0], Y)


def test_gqa_is_causal_after_a_cache():
    """Without a mask, new tokens after P cached ones see keys m <= P + n:
    the whole sequence in two calls equals one call."""
    from course_lib.kv_cache import KVCache

    torch.manual_seed(1)
    m = llama.GroupedQueryAttention(d_model=16, n_heads=4,
                                    n_kv_heads=2).double()
    X = torch.randn(2, 7, 16, dtype=torch.float64)
    cache = KVCache(capacity=7)
    parts = [cache.layer(0).run(m, X[:, :4], return_attention=False)]
    cache.advance(torch.ones(2, 4, dtype=torch.bool))
    parts.append(cache.layer(0).run(m, X[:, 4:], return_attention=False))
    torch.testing.assert_close(torch.cat(parts, 1), m(X)[0])


def test_the_model_takes_positions_as_the_rotary_module_does():
    """LlamaModel(positions=...) equals its blocks run with those
    positions: here two documents packed in one row, each from 0 (a
    uniform offset changes nothing under RoPE, which sees offsets
    only)."""
    m = small(seed=4).double()
    tokens = torch.randint(13, (2, 9))
    packed = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 4])
    with torch.no_grad():
        ours = m(tokens, positions=packed)
        X = m.token_embedding(tokens)
        causal = torch.ones(9, 9, dtype=torch.bool).tril()
        for block in m.layers:
            X = block(X, causal, positions=packed)
        torch.testing.assert_close(ours, m.output(m.norm(X)))
        assert not torch.allclose(ours, m(tokens))
        torch.testing.assert_close(m(tokens, positions=torch.arange(
            5, 14)), m(tokens))  # RoPE: only offsets matter
        # per-sequence positions
        per_row = torch.stack([torch.arange(9), packed])
        both = m(tokens, positions=per_row)
        torch.testing.assert_close(both[1], ours[1])
        torch.testing.assert_close(both[0], m(tokens)[0])
    learned = small(positions="learned")
    with torch.no_grad():
        assert learned(tokens, positions=torch.arange(3, 12)).shape == (
            2, 9, 13)
    with pytest.raises(ValueError, match="max_len = 48"):
        m(tokens, positions=torch.arange(40, 49))
    with pytest.raises(ValueError, match="integer tensor"):
        m(tokens, positions=torch.arange(9.0))
    with pytest.raises(ValueError, match=">= 0"):
        m(tokens, positions=torch.arange(-1, 8))


def test_silu_is_public_and_is_torchs():
    x = torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(llama.silu(x), torch.nn.functional.silu(x))
    torch.testing.assert_close(llama.SiLU()(x), torch.nn.SiLU()(x))
    with pytest.raises(ValueError, match="floating-point"):
        llama.silu(torch.arange(3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_floats_norm_in_float32_as_llama(dtype):
    """RMSNorm accepts the dtypes PyTorch's does, computing its
    statistics in float32: Hugging Face's LlamaRMSNorm to the bit."""
    torch.manual_seed(0)
    x = (torch.randn(3, 5, 8) * 300).to(dtype)  # x^2 overflows float16
    norm = RMSNorm(d_model=8)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(8))
    norm.to(dtype)
    theirs = modeling.LlamaRMSNorm(8, eps=1e-6).to(dtype)
    with torch.no_grad():
        theirs.weight.copy_(norm.weight)
    ours = norm(x)
    assert ours.dtype == dtype and torch.isfinite(ours).all()
    assert torch.equal(ours, theirs(x))
    assert torch.equal(rms_norm(x, norm.weight), ours)
    with pytest.raises(ValueError, match="or float16, bfloat16"):
        rms_norm(torch.arange(4))


def test_rope_theta_from_either_transformers_config():
    from types import SimpleNamespace

    assert llama.rope_theta(SimpleNamespace(
        rope_parameters={"rope_type": "default", "rope_theta": 5e5})) == 5e5
    assert llama.rope_theta(SimpleNamespace(rope_theta=1e4,
                                            rope_scaling=None)) == 1e4
    with pytest.raises(ValueError, match="not supported"):
        llama.rope_theta(SimpleNamespace(
            rope_theta=1e4, rope_scaling={"rope_type": "llama3"}))
    with pytest.raises(ValueError, match="neither"):
        llama.rope_theta(SimpleNamespace())
    # a transformers-4 style config (rope_theta, no rope_parameters)
    hf = hf_model(seed=6)
    old = SimpleNamespace(**{k: getattr(hf.config, k) for k in (
        "vocab_size", "max_position_embeddings", "hidden_size",
        "num_attention_heads", "intermediate_size", "num_hidden_layers",
        "num_key_value_heads", "rms_norm_eps")}, rope_theta=500.0)
    ours = llama.from_transformers(SimpleNamespace(
        config=old, lm_head=hf.lm_head, model=hf.model))
    tokens = torch.randint(37, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits,
                                   atol=2e-6, rtol=1e-5)
