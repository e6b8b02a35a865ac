"""Tests for course_lib.induction: the attention-only model against the
same model built from PyTorch's modules, the detectors against loops over
the definition, the ablation and bad input."""

import pytest
import torch
from torch import nn

from course_lib import induction as ind
from course_lib.multihead import MultiHeadAttention
from tests.conftest import TOL


def test_repeated_tokens():
    t = ind.repeated_tokens(3, 5, 7, generator=torch.Generator()
                            .manual_seed(0))
    assert t.shape == (3, 10) and t.dtype == torch.int64
    assert torch.equal(t[:, :5], t[:, 5:]) and int(t.max()) < 7


def test_model_matches_torch_modules(dtype, tol):
    torch.manual_seed(0)
    D, H, V, N = 8, 2, 9, 6
    ours = ind.AttentionOnlyTransformer(vocab_size=V, max_len=N, d_model=D,
                                        n_heads=H, n_layers=2).to(dtype)
    theirs = [nn.MultiheadAttention(D, H, batch_first=True, dtype=dtype)
              for _ in range(2)]
    tok, pos = nn.Embedding(V, D, dtype=dtype), nn.Embedding(N, D,
                                                            dtype=dtype)
    norm, out = nn.LayerNorm(D, dtype=dtype), nn.Linear(D, V, dtype=dtype)
    with torch.no_grad():
        ours.token_embedding.weight.copy_(tok.weight)
        ours.position_embedding.weight.copy_(pos.weight)
        ours.norm.load_state_dict(norm.state_dict())
        ours.output.load_state_dict(out.state_dict())
    ours.layers = nn.ModuleList(MultiHeadAttention.from_torch(m)
                                for m in theirs)
    tokens = torch.randint(V, (2, N))
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    with torch.no_grad():
        X = tok(tokens) + pos(torch.arange(N))
        for m in theirs:
            X = X + m(X, X, X, attn_mask=future, need_weights=False)[0]
        expected = out(norm(X))
        got, weights = ours(tokens, return_attention=True)
    torch.testing.assert_close(got, expected, **tol)
    assert len(weights) == 2 and weights[1].shape == (2, H, N, N)


def _loop_induction(A, tokens):
    """The definition, one query at a time."""
    H, N, _ = A.shape
    scores = []
    for h in range(H):
        total, queries = 0.0, 0
        for n in range(N):
            targets = {m + 1 for m in range(n) if tokens[m] == tokens[n]}
            if targets:
                total += sum(float(A[h, n, j]) for j in targets)
                queries += 1
        scores.append(total / queries if queries else float("nan"))
    return torch.tensor(scores, dtype=torch.float64)


def test_induction_scores_follow_the_definition(dtype):
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(4, (3, 12), generator=g)  # many repeats
    A = torch.rand(3, 2, 12, 12, generator=g, dtype=dtype).tril()
    A = A / A.sum(-1, keepdim=True)
    got = ind.induction_scores(A, tokens)
    assert got.shape == (3, 2) and got.dtype == dtype
    for b in range(3):
        torch.testing.assert_close(got[b].double(),
                                   _loop_induction(A[b], tokens[b]),
                                   **TOL[dtype])


def test_perfect_heads_score_one():
    T = 6
    tokens = torch.cat([torch.arange(T), torch.arange(T)])[None]  # (1, 2T)
    N = 2 * T
    induction = torch.zeros(1, 1, N, N)
    previous = torch.zeros(1, 1, N, N)
    for n in range(N):
        # the second half looks at the token after the earlier copy
        induction[0, 0, n, n - T + 1 if n >= T else 0] = 1.0
        previous[0, 0, n, max(n - 1, 0)] = 1.0
    assert float(ind.induction_scores(induction, tokens)) == 1.0
    assert float(ind.previous_token_scores(previous)) == 1.0
    assert float(ind.induction_scores(previous, tokens)) == 0.0
    # no token occurs twice: no query counts
    assert ind.induction_scores(induction[..., :T, :T],
                                tokens[..., :T]).isnan().all()


def test_half_losses():
    tokens = torch.tensor([[1, 2, 3, 1, 2, 3]])
    logits = torch.zeros(1, 6, 4)
    logits[0, 3, 2] = logits[0, 4, 3] = 50.0  # sure of the second half
    first, second = ind.half_losses(logits, tokens)
    assert abs(first - torch.log(torch.tensor(4.0)).item()) < 1e-6
    assert second < 1e-6


def test_ablating_a_head_removes_exactly_its_share(dtype, tol):
    torch.manual_seed(2)
    mha = MultiHeadAttention(d_model=8, n_heads=2).to(dtype)
    X = torch.randn(3, 5, 8, dtype=dtype)
    before = mha(X)[0]
    W = mha.W_o.weight.detach().clone()
    with ind.ablate_head(mha, 1):
        Q = mha.W_q(X).reshape(3, 5, 2, 4).transpose(1, 2)
        K = mha.W_k(X).reshape(3, 5, 2, 4).transpose(1, 2)
        Vs = mha.W_v(X).reshape(3, 5, 2, 4).transpose(1, 2)
        A = (Q @ K.transpose(-2, -1) / 2).softmax(-1)
        head0 = (A @ Vs)[:, 0]  # (3, 5, 4)
        expected = head0 @ W[:, :4].T + mha.W_o.bias
        torch.testing.assert_close(mha(X)[0], expected, **tol)
    assert torch.equal(mha.W_o.weight, W)
    torch.testing.assert_close(mha(X)[0], before, **tol)


def test_bad_input():
    mha = MultiHeadAttention(d_model=8, n_heads=2)
    with pytest.raises(ValueError, match=r"0 \.\. 1"):
        with ind.ablate_head(mha, 2):
            pass
    with pytest.raises(ValueError, match="N >= 2"):
        ind.previous_token_scores(torch.ones(1, 1, 1))
    with pytest.raises(ValueError, match="integer tokens"):
        ind.induction_scores(torch.ones(1, 3, 3), torch.ones(3))
    model = ind.AttentionOnlyTransformer(vocab_size=5, max_len=4, d_model=8,
                                         n_heads=2, n_layers=1)
    with pytest.raises(ValueError, match="1 <= N <= 4"):
        model(torch.zeros(1, 5, dtype=torch.long))


def test_a_short_training_and_the_head_report():
    """A few steps of the recipe run; the report has one score per head
    and names heads of the first and the last layer."""
    model, run = ind.train_induction_model(0, dict(steps=3, batch_size=4))
    assert len(run["losses"]) == 3 and not model.training
    tokens = ind.repeated_tokens(8, 6, ind.INDUCTION_RECIPE["vocab_size"],
                                 generator=torch.Generator().manual_seed(1))
    report = ind.head_report(model, tokens)
    H = ind.INDUCTION_RECIPE["n_heads"]
    assert [len(r) for r in report["induction"]] == [H, H]
    assert report["induction_head"][0] == 1
    assert report["previous_token_head"][0] == 0
    assert set(report["ablated_second_half_loss"]) == {
        "induction_head", "previous_token_head"}
    W = [m.W_o.weight.clone() for m in model.layers]
    ind.head_report(model, tokens)  # the ablations restore the weights
    assert all(torch.equal(a, m.W_o.weight)
               for a, m in zip(W, model.layers, strict=True))
