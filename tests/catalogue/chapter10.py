"""Catalogue of chapter 10 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    name: "10_language_model"
    for name in ("next_token_loss", "sample_top_k", "kv_attention_step",
                 "induction_scores")
}

# ------------------------------------------------------------ correct

CORRECT = {
    "next_token_loss": [
        ("log_softmax and gather", '''
def next_token_loss(logits, tokens):
    log_p = torch.log_softmax(logits[..., :-1, :], dim=-1)
    picked = log_p.gather(-1, tokens[..., 1:, None])
    return -picked.mean()
'''),
        ("logsumexp minus the target's logit", '''
def next_token_loss(logits, tokens):
    z = logits[..., :-1, :]
    target = z.gather(-1, tokens[..., 1:].unsqueeze(-1)).squeeze(-1)
    return (torch.logsumexp(z, dim=-1) - target).mean()
'''),
    ],
    "sample_top_k": [
        ("threshold at the k-th largest", '''
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    # less the largest: a temperature of 1e-40 gives 0 and -inf
    z = (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.sort(z, dim=-1, descending=True).values[:, top_k - 1]
        z = torch.where(z >= kth[:, None], z, torch.tensor(-math.inf,
                                                           dtype=z.dtype))
    probs = torch.softmax(z, dim=-1)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, replacement=True,
                                    generator=g)
'''),
        ("softmax of the top-k values scattered back", '''
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    # less the largest: a temperature of 1e-40 gives 0 and -inf
    z = (logits - logits.amax(-1, keepdim=True)) / temperature
    k = z.shape[-1] if top_k is None else min(top_k, z.shape[-1])
    values, index = torch.topk(z, k, dim=-1)
    probs = torch.zeros_like(z).scatter(-1, index, values.softmax(-1))
    g = torch.Generator()
    g.manual_seed(seed)
    samples = torch.multinomial(probs, n_samples, replacement=True,
                                generator=g)
    return probs, samples
'''),
    ],
    "kv_attention_step": [
        ("one head at a time", '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    T, D = X_new.shape[-2:]
    d = D // n_heads
    N = K_cache.shape[-2]
    q, k, v = X_new @ W_q, X_new @ W_k, X_new @ W_v
    Ks, Vs, outs = [], [], []
    for h in range(n_heads):
        cols = slice(h * d, (h + 1) * d)
        K = torch.cat([K_cache[..., h, :, :], k[..., cols]], dim=-2)
        V = torch.cat([V_cache[..., h, :, :], v[..., cols]], dim=-2)
        s = q[..., cols] @ K.transpose(-2, -1) / math.sqrt(d)
        allowed = torch.arange(N + T)[None, :] <= N + torch.arange(T)[:, None]
        s = s.masked_fill(~allowed, -math.inf)
        outs.append(torch.softmax(s, -1) @ V)
        Ks.append(K)
        Vs.append(V)
    Y = torch.cat(outs, dim=-1) @ W_o
    return Y, torch.stack(Ks, dim=-3), torch.stack(Vs, dim=-3)
'''),
        ("einsum, the mask from the key index", '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    *batch, T, D = X_new.shape
    d = D // n_heads

    def heads(M):
        return M.reshape(*batch, T, n_heads, d).transpose(-3, -2)

    Q = heads(X_new @ W_q)
    K = torch.cat([K_cache, heads(X_new @ W_k)], -2)
    V = torch.cat([V_cache, heads(X_new @ W_v)], -2)
    N = K.shape[-2] - T
    s = torch.einsum("...td,...md->...tm", Q, K) / d ** 0.5
    future = torch.arange(N + T) > (torch.arange(T) + N)[:, None]
    A = torch.softmax(s.masked_fill(future, float("-inf")), -1)
    out = (A @ V).transpose(-3, -2).reshape(*batch, T, D)
    return out @ W_o, K, V
'''),
    ],
    "induction_scores": [
        ("loops over queries and keys", '''
def induction_scores(A, tokens):
    *batch, H, N, _ = A.shape
    A2 = A.reshape(-1, H, N, N)
    t2 = tokens.reshape(-1, N)
    out = torch.zeros(A2.shape[0], H, dtype=A.dtype)
    for b in range(A2.shape[0]):
        total, count = torch.zeros(H, dtype=A.dtype), 0
        for n in range(N):
            targets = [m + 1 for m in range(n) if t2[b, m] == t2[b, n]]
            if targets:
                total = total + A2[b, :, n, targets].sum(-1)
                count += 1
        out[b] = total / count
    return out.reshape(*batch, H)
'''),
        ("a shifted equality matrix", '''
def induction_scores(A, tokens):
    N = tokens.shape[-1]
    prev = torch.roll(tokens, 1, dims=-1)  # token before each key
    # key j is a target of query n when token j - 1 == token n, j <= n
    j = torch.arange(N)
    target = (tokens[..., :, None] == prev[..., None, :])
    target &= (j[None, :] >= 1) & (j[None, :] <= j[:, None])
    has = target.any(-1)
    mass = (A * target[..., None, :, :]).sum(-1)
    return (mass * has[..., None, :]).sum(-1) / has.sum(-1)[..., None]
'''),
    ],
}

# ------------------------------------------------------------- wrong

WRONG = {
    "next_token_loss": [
        ("the targets are not shifted", '''
def next_token_loss(logits, tokens):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                             tokens.reshape(-1))
'''),
        ("shifted the wrong way", '''
def next_token_loss(logits, tokens):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(
        logits[..., 1:, :].reshape(-1, V), tokens[..., :-1].reshape(-1))
'''),
        ("the last row predicts the first token", '''
def next_token_loss(logits, tokens):
    V = logits.shape[-1]
    targets = torch.roll(tokens, -1, dims=-1)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                             targets.reshape(-1))
'''),
        ("a sum instead of a mean", '''
def next_token_loss(logits, tokens):
    log_p = torch.log_softmax(logits[..., :-1, :], dim=-1)
    return -log_p.gather(-1, tokens[..., 1:, None]).sum()
'''),
        ("the probability instead of its logarithm", '''
def next_token_loss(logits, tokens):
    p = torch.softmax(logits[..., :-1, :], dim=-1)
    return -p.gather(-1, tokens[..., 1:, None]).mean()
'''),
    ],
    "sample_top_k": [
        ("the logits are multiplied by the temperature", '''
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    z = logits * temperature
    if top_k is not None:
        kth = z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = z.softmax(-1)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, True, generator=g)
'''),
        ("top-k without renormalising", '''
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    probs = (logits / temperature).softmax(-1)
    if top_k is not None:
        kth = probs.topk(min(top_k, probs.shape[-1]), -1).values[:, -1:]
        probs = probs * (probs >= kth)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, True, generator=g)
'''),
        ("top-k keeps one symbol too many", '''
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    # less the largest: a temperature of 1e-40 gives 0 and -inf
    z = (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k is not None:
        kth = z.topk(min(top_k + 1, z.shape[-1]), -1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = z.softmax(-1)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, True, generator=g)
'''),
        ("the samples are drawn from the unfiltered softmax", '''
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    # less the largest: a temperature of 1e-40 gives 0 and -inf
    z = (logits - logits.amax(-1, keepdim=True)) / temperature
    if top_k is not None:
        kth = z.topk(min(top_k, z.shape[-1]), -1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = z.softmax(-1)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(logits.softmax(-1), n_samples, True,
                                    generator=g)
'''),
    ],
    "kv_attention_step": [
        ("the new tokens do not attend to themselves", '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    *batch, T, D = X_new.shape
    d = D // n_heads
    split = lambda M: M.reshape(*batch, T, n_heads, d).transpose(-3, -2)
    Q = split(X_new @ W_q)
    A = torch.softmax(Q @ K_cache.transpose(-2, -1) / d ** 0.5, -1)
    Y = (A @ V_cache).transpose(-3, -2).reshape(*batch, T, D) @ W_o
    K = torch.cat([K_cache, split(X_new @ W_k)], -2)
    V = torch.cat([V_cache, split(X_new @ W_v)], -2)
    return Y, K, V
'''),
        ("the new tokens see each other without a causal mask", '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    *batch, T, D = X_new.shape
    d = D // n_heads
    split = lambda M: M.reshape(*batch, T, n_heads, d).transpose(-3, -2)
    Q = split(X_new @ W_q)
    K = torch.cat([K_cache, split(X_new @ W_k)], -2)
    V = torch.cat([V_cache, split(X_new @ W_v)], -2)
    A = torch.softmax(Q @ K.transpose(-2, -1) / d ** 0.5, -1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, T, D) @ W_o
    return Y, K, V
'''),
        ("scaled by sqrt(D) instead of sqrt(d_head)", '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    *batch, T, D = X_new.shape
    d = D // n_heads
    split = lambda M: M.reshape(*batch, T, n_heads, d).transpose(-3, -2)
    Q = split(X_new @ W_q)
    K = torch.cat([K_cache, split(X_new @ W_k)], -2)
    V = torch.cat([V_cache, split(X_new @ W_v)], -2)
    N = K.shape[-2] - T
    s = Q @ K.transpose(-2, -1) / D ** 0.5
    mask = torch.ones(T, N + T, dtype=torch.bool).tril(N)
    A = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, T, D) @ W_o
    return Y, K, V
'''),
        ("the new keys go before the cached ones", '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    *batch, T, D = X_new.shape
    d = D // n_heads
    split = lambda M: M.reshape(*batch, T, n_heads, d).transpose(-3, -2)
    Q = split(X_new @ W_q)
    K = torch.cat([split(X_new @ W_k), K_cache], -2)
    V = torch.cat([split(X_new @ W_v), V_cache], -2)
    N = K.shape[-2] - T
    s = Q @ K.transpose(-2, -1) / d ** 0.5
    mask = torch.ones(T, N + T, dtype=torch.bool).tril(N)
    A = torch.softmax(s.masked_fill(~mask, -math.inf), -1)
    Y = (A @ V).transpose(-3, -2).reshape(*batch, T, D) @ W_o
    return Y, K, V
'''),
    ],
    "induction_scores": [
        ("the query counted as an earlier occurrence of itself", '''
def induction_scores(A, tokens):
    N = tokens.shape[-1]
    same = tokens[..., :, None] == tokens[..., None, :]
    # tril(0): the query itself counts as an earlier occurrence
    earlier = same & torch.ones(N, N, dtype=torch.bool).tril(0)
    target = torch.nn.functional.pad(earlier[..., :-1], (1, 0))
    has = (same & torch.ones(N, N, dtype=torch.bool).tril(-1)).any(-1)
    mass = (A * target[..., None, :, :]).sum(-1)
    return (mass * has[..., None, :]).sum(-1) / has.sum(-1)[..., None]
'''),
        ("the earlier occurrence itself instead of the token after it", '''
def induction_scores(A, tokens):
    N = tokens.shape[-1]
    same = tokens[..., :, None] == tokens[..., None, :]
    earlier = same & torch.ones(N, N, dtype=torch.bool).tril(-1)
    has = earlier.any(-1)
    mass = (A * earlier[..., None, :, :]).sum(-1)
    return (mass * has[..., None, :]).sum(-1) / has.sum(-1)[..., None]
'''),
        ("every query counts, also those without an earlier occurrence",
         '''
def induction_scores(A, tokens):
    N = tokens.shape[-1]
    same = tokens[..., :, None] == tokens[..., None, :]
    earlier = same & torch.ones(N, N, dtype=torch.bool).tril(-1)
    target = torch.nn.functional.pad(earlier[..., :-1], (1, 0))
    return (A * target[..., None, :, :]).sum(-1).mean(-1)
'''),
        ("the sequence is assumed to repeat with period N / 2", '''
def induction_scores(A, tokens):
    N = A.shape[-1]
    T = N // 2
    return torch.stack([A[..., n, n - T + 1] for n in range(T, N)],
                       -1).mean(-1)
'''),
        ("only the most recent earlier occurrence counts", '''
def induction_scores(A, tokens):
    *batch, H, N, _ = A.shape
    A2, t2 = A.reshape(-1, H, N, N), tokens.reshape(-1, N)
    out = torch.zeros(A2.shape[0], H, dtype=A.dtype)
    for b in range(A2.shape[0]):
        total, count = 0, 0
        for n in range(N):
            ms = [m for m in range(n) if t2[b, m] == t2[b, n]]
            if ms:
                total = total + A2[b, :, n, ms[-1] + 1]
                count += 1
        out[b] = total / count
    return out.reshape(*batch, H)
'''),
    ],
}

# --------------------------------------------------------------- cheats

CHEATS = [
    ("next_token_loss calls the reference", "next_token_loss", '''
from course_lib import language_model as _ref
def next_token_loss(logits, tokens):
    return _ref.next_token_loss(logits, tokens)
''', "course_lib's next_token_loss"),
    ("sample_top_k through course_lib's filter_logits", "sample_top_k", '''
from course_lib.generation import filter_logits as _f
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    probs = _f(logits, temperature=temperature, top_k=top_k).softmax(-1)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, True, generator=g)
''', "course_lib's filter_logits"),
    ("kv_attention_step through PyTorch's attention", "kv_attention_step",
     '''
def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    *batch, T, D = X_new.shape
    d = D // n_heads
    split = lambda M: M.reshape(*batch, T, n_heads, d).transpose(-3, -2)
    Q = split(X_new @ W_q)
    K = torch.cat([K_cache, split(X_new @ W_k)], -2)
    V = torch.cat([V_cache, split(X_new @ W_v)], -2)
    N = K.shape[-2] - T
    mask = torch.ones(T, N + T, dtype=torch.bool).tril(N)
    out = torch.nn.functional.scaled_dot_product_attention(Q, K, V,
                                                           attn_mask=mask)
    return out.transpose(-3, -2).reshape(*batch, T, D) @ W_o, K, V
''', "PyTorch's scaled_dot_product_attention"),
    ("induction_scores calls the reference", "induction_scores", '''
from course_lib.induction import induction_scores as _ref
def induction_scores(A, tokens):
    return _ref(A, tokens)
''', "course_lib's induction_scores"),
]
