"""Right answers to chapters 6-10 in the styles students write (see
``tests/catalogue/styles_1_5.py``): each keeps full marks, in process
and in the student's own kernel."""

CHAPTER_OF = {}
WRONG = {}

CORRECT = {
    "sinusoidal_encoding": [
        ("einsum of positions and frequencies, a local named signal", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0, *,
                        dtype=torch.float32):
    pos = torch.arange(n_positions, dtype=torch.float64)
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    signal = torch.einsum("n,f->nf", pos, base ** (-i / d_model))
    pe = torch.stack([signal.sin(), signal.cos()], dim=-1)
    return pe.reshape(n_positions, d_model).to(dtype)
'''),
        ("even and odd columns filled by a helper, IPython magic", '''
%precision 4
def _angles(n, d, base):
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.arange(n, dtype=torch.float64)[:, None] * omega


def sinusoidal_encoding(n_positions, d_model, base=10000.0, *,
                        dtype=torch.float32):
    angle = _angles(n_positions, d_model, base)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe.to(dtype)
'''),
    ],
    "relative_position_matrix": [
        ("a loop writing 2 x 2 blocks on the diagonal, a local named os", '''
def relative_position_matrix(offset, d_model, base=10000.0, *,
                             dtype=torch.float32):
    os = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        a = offset * base ** (-2 * i / d_model)
        c, s = math.cos(a), math.sin(a)
        os[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor(
            [[c, -s], [s, c]], dtype=torch.float64)
    return os.to(dtype)
'''),
        ("cos on the diagonal, sin beside it, with a helper", '''
def frequencies(d_model, base):
    return base ** (-torch.arange(0, d_model, 2, dtype=torch.float64)
                    / d_model)


def relative_position_matrix(offset, d_model, base=10000.0, *,
                             dtype=torch.float32):
    a = offset * frequencies(d_model, base)
    R = torch.diag(a.cos().repeat_interleave(2))
    idx = torch.arange(0, d_model, 2)
    R[idx, idx + 1] = -a.sin()
    R[idx + 1, idx] = a.sin()
    return R.to(dtype)
'''),
    ],
    "apply_rotary": [
        ("pairs rotated by hand, locals named sys and inspect", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2:]
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * w
    sys, inspect = angle.cos(), angle.sin()
    x, y = Z[..., 0::2].double(), Z[..., 1::2].double()
    out = torch.empty(Z.shape, dtype=torch.float64)
    out[..., 0::2] = x * sys - y * inspect
    out[..., 1::2] = x * inspect + y * sys
    return out.to(Z.dtype)
'''),
    ],
    "RotaryAttention": [
        ("projections set with setattr, rotation helper, einsum", '''
def rotate(Z, base=10000.0):
    N, d = Z.shape[-2:]
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    t = torch.arange(N, dtype=torch.float64)[:, None] * w
    c, s = t.cos(), t.sin()
    x, y = Z[..., 0::2].double(), Z[..., 1::2].double()
    out = torch.stack([x * c - y * s, x * s + y * c], dim=-1)
    return out.flatten(-2).to(Z.dtype)


class RotaryAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def forward(self, X, mask=None):
        H = self.n_heads
        # (..., N, D) -> (..., H, N, d)
        Q, K, V = (W(X).unflatten(-1, (H, -1)).transpose(-3, -2)
                   for W in (self.W_q, self.W_k, self.W_v))
        Q, K = rotate(Q), rotate(K)
        S = torch.einsum("...hnd,...hmd->...hnm", Q, K) / math.sqrt(
            Q.shape[-1])
        if mask is not None:
            S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        A = torch.softmax(S, dim=-1)
        Y = torch.einsum("...hnm,...hmd->...nhd", A, V).flatten(-2)
        return self.W_o(Y), A
'''),
        ("a base class of my own for attention, a local named signal", '''
class Attention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def position(self, T):
        return T

    def forward(self, X, mask=None):
        H = self.n_heads
        Q, K, V = (W(X).unflatten(-1, (H, -1)).transpose(-3, -2)
                   for W in (self.W_q, self.W_k, self.W_v))
        Q, K = self.position(Q), self.position(K)
        signal = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            signal = signal.masked_fill(~mask[..., None, :, :],
                                        float("-inf"))
        A = signal.softmax(-1)
        return self.W_o((A @ V).transpose(-3, -2).flatten(-2)), A


class RotaryAttention(Attention):
    def position(self, Z):
        N, d = Z.shape[-2:]
        w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        t = torch.arange(N, dtype=torch.float64)[:, None] * w
        z = torch.view_as_complex(
            Z.double().unflatten(-1, (-1, 2)).contiguous())
        z = z * torch.polar(torch.ones_like(t), t)
        return torch.view_as_real(z).flatten(-2).to(Z.dtype)
'''),
        ("a class built with type(...)", '''
def _init(self, *, d_model, n_heads, bias=True, dropout=0.0):
    nn.Module.__init__(self)
    self.n_heads = n_heads
    for name in ("W_q", "W_k", "W_v", "W_o"):
        self.add_module(name, nn.Linear(d_model, d_model, bias=bias))


def _turn(Z):
    N, d = Z.shape[-2:]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    t = torch.arange(N, dtype=torch.float64)[:, None] * w
    x, y = Z[..., 0::2].double(), Z[..., 1::2].double()
    return torch.stack([x * t.cos() - y * t.sin(),
                        x * t.sin() + y * t.cos()], -1).flatten(-2).to(
        Z.dtype)


def _forward(self, X, mask=None):
    H = self.n_heads
    Q, K, V = (W(X).unflatten(-1, (H, -1)).transpose(-3, -2)
               for W in (self.W_q, self.W_k, self.W_v))
    S = _turn(Q) @ _turn(K).transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask.unsqueeze(-3), float("-inf"))
    A = S.softmax(-1)
    return self.W_o((A @ V).transpose(-3, -2).flatten(-2)), A


RotaryAttention = type("RotaryAttention", (nn.Module,),
                       {"__init__": _init, "forward": _forward})
'''),
    ],
    "patchify": [
        ("reshape and permute in a helper, a local named signal", '''
def _grid(images, p):
    B, C, H, W = images.shape
    # (B, C, H, W) -> (B, H/p, W/p, p, p, C)
    return images.reshape(B, C, H // p, p, W // p, p).permute(
        0, 2, 4, 3, 5, 1)


def patchify(images, patch_size):
    signal = _grid(images, patch_size)
    B = images.shape[0]
    return signal.reshape(B, -1, signal[0, 0, 0].numel())
'''),
        ("einsum to reorder the axes", '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = torch.einsum("bcyixj->byxijc", x)
    return x.reshape(B, (H // p) * (W // p), p * p * C)
'''),
    ],
    "unpatchify": [
        ("einsum to reorder the axes, a local named os", '''
def unpatchify(patches, patch_size, *, height, width):
    B, N, P = patches.shape
    p = patch_size
    os = patches.reshape(B, height // p, width // p, p, p, P // (p * p))
    img = torch.einsum("byxijc->bcyixj", os)
    return img.reshape(B, -1, height, width)
'''),
    ],
    "PatchEmbedding": [
        ("parameters set with setattr, the split in a helper", '''
def split_patches(images, p):
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // p, p, W // p, p)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(B, -1, p * p * C)


class PatchEmbedding(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.patch_size = patch_size
        n = (image_size // patch_size) ** 2
        shapes = {"cls_token": (1, 1, d_model),
                  "position_embedding": (1, n + 1, d_model)}
        for name, shape in shapes.items():
            setattr(self, name, nn.Parameter(torch.zeros(shape)))
        self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)

    def forward(self, images):
        tokens = self.projection(split_patches(images, self.patch_size))
        cls = self.cls_token.expand(images.shape[0], -1, -1)
        return torch.cat([cls, tokens], dim=1) + self.position_embedding
'''),
        ("einsum with the projection's weight, locals named sys", '''
class PatchEmbedding(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.p = patch_size
        n = (image_size // patch_size) ** 2
        self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d_model))
        self.position_embedding = nn.Parameter(
            torch.randn(1, n + 1, d_model))

    def forward(self, images):
        B, C, H, W = images.shape
        p = self.p
        sys = torch.einsum("bcyixj->byxijc", images.reshape(
            B, C, H // p, p, W // p, p)).reshape(B, -1, p * p * C)
        tokens = torch.einsum("bnk,dk->bnd", sys, self.projection.weight)
        tokens = tokens + self.projection.bias
        Z = torch.cat([self.cls_token.expand(B, 1, -1), tokens], dim=1)
        return Z + self.position_embedding
'''),
        ("a class built with type(...)", '''
def _init(self, *, image_size, patch_size, in_channels, d_model):
    nn.Module.__init__(self)
    self.patch_size = patch_size
    n = (image_size // patch_size) ** 2
    self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)
    self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
    self.position_embedding = nn.Parameter(torch.zeros(1, n + 1, d_model))


def _forward(self, images):
    B, C, H, W = images.shape
    p = self.patch_size
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    x = x.permute(0, 2, 3, 4, 5, 1).reshape(B, -1, p * p * C)
    cls = self.cls_token.repeat(B, 1, 1)
    return torch.cat([cls, self.projection(x)], 1) + self.position_embedding


PatchEmbedding = type("PatchEmbedding", (nn.Module,),
                      {"__init__": _init, "forward": _forward})
'''),
    ],
    "VisionTransformer": [
        ("an encoder of my own, layers in an nn.ModuleList via setattr", '''
from course_lib.layers import TransformerLayer
from course_lib.vit import PatchEmbedding


class VisionTransformer(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, n_classes,
                 d_model, depth, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.patch_embedding = PatchEmbedding(
            image_size=image_size, patch_size=patch_size,
            in_channels=in_channels, d_model=d_model)
        encoder = nn.Module()
        setattr(encoder, "layers", nn.ModuleList(
            TransformerLayer(d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                             norm_first=True) for _ in range(depth)))
        setattr(encoder, "norm", nn.LayerNorm(d_model))
        self.encoder = encoder
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, images, *, return_attention=False):
        signal = self.patch_embedding(images)
        weights = []
        for layer in self.encoder.layers:
            signal, A = layer(signal, return_attention=True)
            weights.append(A)
        logits = self.head(self.encoder.norm(signal)[:, 0])
        return (logits, weights) if return_attention else logits
'''),
        ("a ModuleDict encoder and a patch embedding of my own", '''
from course_lib.layers import TransformerLayer


class Patches(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        self.p = patch_size
        n = (image_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.position_embedding = nn.Parameter(
            torch.zeros(1, n + 1, d_model))
        self.projection = nn.Linear(patch_size ** 2 * in_channels, d_model)

    def forward(self, images):
        B, C, H, W = images.shape
        p = self.p
        x = images.reshape(B, C, H // p, p, W // p, p)
        x = x.permute(0, 2, 4, 3, 5, 1).reshape(B, -1, p * p * C)
        cls = self.cls_token.expand(B, -1, -1)
        return torch.cat([cls, self.projection(x)], 1) + (
            self.position_embedding)


class VisionTransformer(nn.Module):
    def __init__(self, *, image_size, patch_size, in_channels, n_classes,
                 d_model, depth, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.patch_embedding = Patches(image_size, patch_size, in_channels,
                                       d_model)
        self.encoder = nn.ModuleDict({
            "layers": nn.ModuleList([
                TransformerLayer(d_model=d_model, n_heads=n_heads,
                                 d_ff=d_ff, norm_first=True)
                for _ in range(depth)]),
            "norm": nn.LayerNorm(d_model)})
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, images, *, return_attention=False):
        Z = self.patch_embedding(images)
        weights = []
        for layer in self.encoder["layers"]:
            Z, A = layer(Z, return_attention=True)
            weights.append(A)
        logits = self.head(self.encoder["norm"](Z[:, 0]))
        if return_attention:
            return logits, weights
        return logits
'''),
    ],
    "vit_parameter_count": [
        ("a helper per block, locals named operator and inspect", '''
def linear(d_in, d_out):
    return d_in * d_out + d_out


def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    D = d_model
    n = (image_size // patch_size) ** 2
    operator = linear(patch_size ** 2 * in_channels, D) + D + (n + 1) * D
    inspect = 4 * linear(D, D) + linear(D, d_ff) + linear(d_ff, D) + 4 * D
    return operator + depth * inspect + 2 * D + linear(D, n_classes)
'''),
        ("a loop over the layers, a dict of counts", '''
def vit_parameter_count(*, image_size, patch_size, in_channels, n_classes,
                        d_model, depth, d_ff):
    D, P = d_model, patch_size * patch_size * in_channels
    N = (image_size // patch_size) ** 2
    counts = {"patches": D * P + D, "cls": D, "positions": (N + 1) * D}
    for i in range(depth):
        counts[f"attention {i}"] = 4 * (D * D + D)
        counts[f"ffn {i}"] = d_ff * D + d_ff + D * d_ff + D
        counts[f"norms {i}"] = 2 * 2 * D
    counts["final norm"] = 2 * D
    counts["head"] = n_classes * D + n_classes
    return sum(counts.values())
'''),
    ],
    "elu_feature_map": [
        ("a local named signal and torch.where", '''
def elu_feature_map(x):
    signal = torch.where(x > 0, x, torch.expm1(x))
    return signal + 1
'''),
        ("relu plus exp of the negative part, in a helper", '''
def negative_part(x):
    return torch.exp(torch.clamp(x, max=0.0))


def elu_feature_map(x):
    return torch.relu(x) + negative_part(x)
'''),
    ],
    "linear_attention": [
        ("helpers for the sums, locals named sys and os", '''
def elu1(x):
    return torch.where(x > 0, x + 1, torch.exp(x))


def key_sums(pk, V):
    return pk.transpose(-2, -1) @ V, pk.sum(dim=-2)


def linear_attention(Q, K, V, feature_map=elu1, eps=1e-6):
    pq, pk = feature_map(Q), feature_map(K)
    sys, os = key_sums(pk, V)
    return (pq @ sys) / ((pq * os.unsqueeze(-2)).sum(-1, keepdim=True)
                         + eps)
'''),
    ],
    "causal_linear_attention": [
        ("cumulative sums of outer products, a local named signal", '''
def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    signal = torch.cumsum(pk[..., :, :, None] * V[..., :, None, :], dim=-3)
    z = torch.cumsum(pk, dim=-2)
    num = torch.einsum("...nm,...nmd->...nd", pq, signal)
    den = (pq * z).sum(-1, keepdim=True) + eps
    return num / den
'''),
        ("an update helper in a loop, a local named os", '''
def update(S, z, k, v):
    return S + k[..., :, None] * v[..., None, :], z + k


def causal_linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = pk.new_zeros(*pk.shape[:-2], pk.shape[-1], V.shape[-1])
    z = pk.new_zeros(*pk.shape[:-2], pk.shape[-1])
    os = torch.empty(*Q.shape[:-1], V.shape[-1], dtype=V.dtype)
    for n in range(Q.shape[-2]):
        S, z = update(S, z, pk[..., n, :], V[..., n, :])
        q = pq[..., n, :]
        num = (q[..., None, :] @ S).squeeze(-2)
        os[..., n, :] = num / ((q * z).sum(-1, keepdim=True) + eps)
    return os
'''),
    ],
    "recurrent_linear_attention_step": [
        ("outer products by broadcasting, a tuple as the state", '''
def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    phi = feature_map or (lambda x: nn.functional.elu(x) + 1)
    pq, pk = phi(q), phi(k)
    S = pk[..., :, None] * v[..., None, :]
    z = pk
    if state is not None:
        S, z = state[0] + S, state[1] + z
    num = (pq[..., :, None] * S).sum(-2)
    den = (pq * z).sum(-1, keepdim=True) + eps
    return num / den, (S, z)
'''),
        ("a helper for the update, locals named operator and inspect", '''
def update(state, pk, v):
    operator = pk.unsqueeze(-1) @ v.unsqueeze(-2)
    if state is None:
        return operator, pk
    return state[0] + operator, state[1] + pk


def recurrent_linear_attention_step(state, q, k, v, feature_map=None,
                                    eps=1e-6):
    if feature_map is None:
        def feature_map(x):
            return nn.functional.elu(x) + 1
    pq = feature_map(q)
    S, z = update(state, feature_map(k), v)
    inspect = (pq.unsqueeze(-2) @ S).squeeze(-2)
    return inspect / ((pq * z).sum(-1, keepdim=True) + eps), [S, z]
'''),
    ],
    "chunked_linear_attention_step": [
        ("a helper for the empty state, locals named sys and signal", '''
def empty_state(pk, V):
    *batch, _, m = pk.shape
    return (torch.zeros(*batch, m, V.shape[-1], dtype=V.dtype),
            torch.zeros(*batch, m, dtype=V.dtype))


def chunked_linear_attention_step(state, Q, K, V, feature_map=None,
                                  eps=1e-6):
    phi = feature_map or (lambda x: nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S, z = state if state is not None else empty_state(pk, V)
    sys = torch.einsum("...nm,...jm->...nj", pq, pk).tril()
    signal = torch.einsum("...nm,...md->...nd", pq, S) + sys @ V
    den = torch.einsum("...nm,...m->...n", pq, z) + sys.sum(-1) + eps
    S = S + torch.einsum("...jm,...jd->...md", pk, V)
    z = z + pk.sum(-2)
    return signal / den[..., None], (S, z)
'''),
    ],
    "favor_plus_features": [
        ("a loop over the random features, a local named os", '''
def favor_plus_features(X, W):
    m = W.shape[0]
    half_norm = 0.5 * (X * X).sum(dim=-1)
    os = [torch.exp(X @ W[j] - half_norm) for j in range(m)]
    return torch.stack(os, dim=-1) / math.sqrt(m)
'''),
        ("a helper for the squared norm, in float64 inside", '''
def half_squared_norm(X):
    return (X.double() ** 2).sum(-1, keepdim=True) / 2


def favor_plus_features(X, W):
    proj = X.double() @ W.double().transpose(0, 1)
    phi = torch.exp(proj - half_squared_norm(X)) / W.shape[0] ** 0.5
    return phi.to(X.dtype)
'''),
    ],
    "local_attention_mask": [
        ("distance from the diagonal, a local named signal", '''
def local_attention_mask(n, window, device=None):
    signal = torch.arange(n, device=device)
    return (signal[:, None] - signal[None, :]).abs() <= window
'''),
        ("a band built from shifted identities, IPython magic", '''
%precision 3
def local_attention_mask(n, window, device=None):
    band = torch.zeros(n, n, dtype=torch.bool, device=device)
    reach = min(window, n - 1)
    for k in range(-reach, reach + 1):  # the k-th diagonal
        band |= torch.diag(torch.ones(n - abs(k), dtype=torch.bool,
                                      device=device), k)
    return band
'''),
    ],
    "teacher_forcing": [
        ("a helper per sentence, locals named sys and os", '''
def one_sentence(row, bos_id, eos_id, pad_id, width):
    sys = [w for w in row if w != pad_id]
    os = [pad_id] * (width - len(sys) - 1)
    return [bos_id] + sys + os, sys + [eos_id] + os


def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    width = words.shape[1] + 1
    pairs = [one_sentence(row, bos_id, eos_id, pad_id, width)
             for row in words.tolist()]
    inputs = torch.tensor([a for a, _ in pairs], dtype=words.dtype)
    labels = torch.tensor([b for _, b in pairs], dtype=words.dtype)
    return inputs, labels
'''),
    ],
    "DecoderLayer": [
        ("norms from an nn.ModuleList, sublayers set with setattr", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention


class DecoderLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        for name in ("self_attention", "cross_attention"):
            setattr(self, name, MultiHeadAttention(d_model=d_model,
                                                   n_heads=n_heads))
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1, self.norm2, self.norm3 = nn.ModuleList(
            nn.LayerNorm(d_model) for _ in range(3))
        self.norm_first = norm_first

    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
        pre = self.norm_first
        h = self.norm1(X) if pre else X
        signal, A_self = self.self_attention(h, tgt_mask)
        X = X + signal if pre else self.norm1(X + signal)
        h = self.norm2(X) if pre else X
        signal, A_cross = self.cross_attention(h, memory_mask,
                                               context=memory)
        X = X + signal if pre else self.norm2(X + signal)
        h = self.norm3(X) if pre else X
        X = X + self.feed_forward(h) if pre else self.norm3(
            X + self.feed_forward(X))
        return (X, A_self, A_cross) if return_attention else X
'''),
        ("attention of my own on a base class, a local named sys", '''
from course_lib.layers import FeedForward


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model))

    def forward(self, X, mask=None, context=None):
        C = X if context is None else context
        H = self.n_heads
        Q = self.W_q(X).unflatten(-1, (H, -1)).transpose(-3, -2)
        K, V = (W(C).unflatten(-1, (H, -1)).transpose(-3, -2)
                for W in (self.W_k, self.W_v))
        S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
        if mask is not None:
            mask = mask if mask.dim() < 3 else mask.unsqueeze(-3)
            S = S.masked_fill(~mask, float("-inf"))
        A = torch.softmax(S, dim=-1)
        return self.W_o((A @ V).transpose(-3, -2).flatten(-2)), A


class DecoderLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False,
                 dropout=0.0):
        super().__init__()
        self.self_attention = Attention(d_model, n_heads)
        self.cross_attention = Attention(d_model, n_heads)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.norm_first = norm_first

    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
        sys = []

        def attend(module, mask, context):
            def run(Z):
                out, A = module(Z, mask, context)
                sys.append(A)
                return out
            return run

        steps = [(attend(self.self_attention, tgt_mask, None), self.norm1),
                 (attend(self.cross_attention, memory_mask, memory),
                  self.norm2),
                 (self.feed_forward, self.norm3)]
        for sublayer, norm in steps:
            X = (X + sublayer(norm(X)) if self.norm_first
                 else norm(X + sublayer(X)))
        return (X, sys[0], sys[1]) if return_attention else X
'''),
    ],
    "greedy_decode": [
        ("a helper for the next token, locals named signal and os", '''
def next_tokens(model, src, prefix):
    return model(src, prefix)[:, -1].argmax(dim=-1)


def greedy_decode(model, src, *, bos_id, eos_id, pad_id, max_len):
    os = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    signal = torch.zeros(src.shape[0], dtype=torch.bool)  # finished
    for _ in range(max_len):
        nxt = torch.where(signal, pad_id, next_tokens(model, src, os))
        os = torch.cat([os, nxt[:, None]], dim=1)
        signal = signal | (nxt == eos_id)
        if bool(signal.all()):
            break
    return os[:, 1:]
'''),
    ],
    "input_dependence": [
        ("a helper that perturbs one position, a local named inspect", '''
def perturbed(tgt, m, vocab):
    inspect = tgt.clone()
    inspect[:, m] = (inspect[:, m] + 1) % vocab
    return inspect


def input_dependence(model, src, tgt):
    base = model(src, tgt)
    N = tgt.shape[1]
    columns = []
    for m in range(N):
        diff = (model(src, perturbed(tgt, m, base.shape[-1])) - base).abs()
        columns.append(diff.amax(dim=(0, 2)) > 1e-6)  # (N,)
    return torch.stack(columns, dim=1)
'''),
    ],
    "next_token_loss": [
        ("cross entropy written out with a helper, a local named sys", '''
def log_probs(z):
    return z - torch.logsumexp(z, dim=-1, keepdim=True)


def next_token_loss(logits, tokens):
    sys = log_probs(logits[..., :-1, :])
    picked = torch.gather(sys, -1, tokens[..., 1:].unsqueeze(-1))
    return -picked.mean()
'''),
        ("F.cross_entropy on flattened positions", '''
import torch.nn.functional as F


def next_token_loss(logits, tokens):
    V = logits.shape[-1]
    return F.cross_entropy(logits[..., :-1, :].reshape(-1, V),
                           tokens[..., 1:].reshape(-1))
'''),
    ],
    "sample_top_k": [
        ("a helper that filters, locals named signal and operator", '''
def keep_top_k(z, k):
    if k is None or k >= z.shape[-1]:
        return z
    signal = torch.topk(z, k, dim=-1).values[..., -1:]
    return z.masked_fill(z < signal, float("-inf"))


def sample_top_k(logits, temperature, top_k, n_samples, seed):
    shifted = logits - logits.amax(-1, keepdim=True)
    operator = keep_top_k(shifted / temperature, top_k)
    probs = torch.softmax(operator, dim=-1)
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, replacement=True,
                                    generator=g)
'''),
    ],
    "kv_attention_step": [
        ("split and merge helpers, einsum, a local named os", '''
def heads(T, H):
    return T.unflatten(-1, (H, -1)).transpose(-3, -2)


def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    T = X_new.shape[-2]
    N = K_cache.shape[-2]
    q = heads(X_new @ W_q, n_heads)
    K = torch.cat([K_cache, heads(X_new @ W_k, n_heads)], dim=-2)
    V = torch.cat([V_cache, heads(X_new @ W_v, n_heads)], dim=-2)
    S = torch.einsum("...td,...md->...tm", q, K) / math.sqrt(q.shape[-1])
    os = torch.arange(N + T)[None, :] <= (N + torch.arange(T))[:, None]
    A = torch.softmax(S.masked_fill(~os, float("-inf")), dim=-1)
    Y = torch.einsum("...tm,...md->...td", A, V)
    return Y.transpose(-3, -2).flatten(-2) @ W_o, K, V
'''),
    ],
    "induction_scores": [
        ("einsum with a target matrix, locals named sys and signal", '''
def induction_scores(A, tokens):
    N = tokens.shape[-1]
    m = torch.arange(N)
    # key j is a target of query n when token j - 1 == token n, 1 <= j <= n
    sys = torch.zeros(*tokens.shape, N, dtype=torch.bool)
    sys[..., :, 1:] = tokens[..., :, None] == tokens[..., None, :-1]
    sys &= (m[None, :] >= 1) & (m[None, :] <= m[:, None])
    signal = sys.any(-1)
    mass = torch.einsum("...hnm,...nm->...hn", A, sys.to(A.dtype))
    return (mass * signal[..., None, :]).sum(-1) / signal.sum(-1)[
        ..., None]
'''),
    ],
}


# More ways to build the module exercises, and more styles where there
# were three.
CORRECT["VisionTransformer"].append(
    ("a classifier base class of my own, a local named os", '''
from course_lib.layers import TransformerLayer
from course_lib.vit import PatchEmbedding


class Classifier(nn.Module):
    def __init__(self, d_model, n_classes):
        super().__init__()
        self.head = nn.Linear(d_model, n_classes)

    def classify(self, Z):
        return self.head(Z[:, 0])


class VisionTransformer(Classifier):
    def __init__(self, *, image_size, patch_size, in_channels, n_classes,
                 d_model, depth, n_heads, d_ff, dropout=0.0):
        super().__init__(d_model, n_classes)
        self.patch_embedding = PatchEmbedding(
            image_size=image_size, patch_size=patch_size,
            in_channels=in_channels, d_model=d_model)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList()
        for _ in range(depth):
            self.encoder.layers.append(TransformerLayer(
                d_model=d_model, n_heads=n_heads, d_ff=d_ff,
                norm_first=True))
        self.encoder.norm = nn.LayerNorm(d_model)

    def forward(self, images, *, return_attention=False):
        os = self.patch_embedding(images)
        weights = []
        for layer in self.encoder.layers:
            os, A = layer(os, return_attention=True)
            weights.append(A)
        logits = self.classify(self.encoder.norm(os))
        return (logits, weights) if return_attention else logits
'''))
CORRECT["DecoderLayer"].append(
    ("a class built with type(...), a residual helper", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention


def _init(self, *, d_model, n_heads, d_ff, norm_first=False, dropout=0.0):
    nn.Module.__init__(self)
    self.self_attention = MultiHeadAttention(d_model=d_model,
                                             n_heads=n_heads)
    self.cross_attention = MultiHeadAttention(d_model=d_model,
                                              n_heads=n_heads)
    self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
    for i in (1, 2, 3):
        self.add_module(f"norm{i}", nn.LayerNorm(d_model))
    self.norm_first = norm_first


def _residual(self, norm, X, sublayer):
    if self.norm_first:
        out, A = sublayer(norm(X))
        return X + out, A
    out, A = sublayer(X)
    return norm(X + out), A


def _forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
             return_attention=False):
    X, A_self = _residual(self, self.norm1, X,
                          lambda Z: self.self_attention(Z, tgt_mask))
    X, A_cross = _residual(self, self.norm2, X,
                           lambda Z: self.cross_attention(
                               Z, memory_mask, context=memory))
    X, _ = _residual(self, self.norm3, X,
                     lambda Z: (self.feed_forward(Z), None))
    return (X, A_self, A_cross) if return_attention else X


DecoderLayer = type("DecoderLayer", (nn.Module,),
                    {"__init__": _init, "forward": _forward})
'''))
CORRECT["linear_attention"].append(
    ("a loop over the keys accumulating the sums", '''
def linear_attention(Q, K, V, feature_map=None, eps=1e-6):
    phi = feature_map or (lambda x: nn.functional.elu(x) + 1)
    pq, pk = phi(Q), phi(K)
    S = pk.new_zeros(*pk.shape[:-2], pk.shape[-1], V.shape[-1])
    z = pk.new_zeros(*pk.shape[:-2], pk.shape[-1])
    for j in range(K.shape[-2]):
        S = S + pk[..., j, :, None] * V[..., j, None, :]
        z = z + pk[..., j, :]
    return (pq @ S) / ((pq @ z.unsqueeze(-1)) + eps)
'''))
CORRECT["sample_top_k"].append(
    ("a loop over the rows, IPython magic in the cell", '''
%precision 4
def sample_top_k(logits, temperature, top_k, n_samples, seed):
    # less the largest: a temperature of 1e-40 gives 0 and -inf
    z = (logits - logits.amax(-1, keepdim=True)) / temperature
    probs = torch.zeros_like(z)
    for b in range(z.shape[0]):
        row = z[b]
        if top_k is not None and top_k < row.shape[-1]:
            kth = row.sort(descending=True).values[top_k - 1]
            row = row.masked_fill(row < kth, float("-inf"))
        e = torch.exp(row - row.max())
        probs[b] = e / e.sum()
    g = torch.Generator().manual_seed(seed)
    return probs, torch.multinomial(probs, n_samples, replacement=True,
                                    generator=g)
'''))
CORRECT["kv_attention_step"].append(
    ("a cache helper, a loop over the new tokens, a local named sys", '''
def extend(cache, new):
    return torch.cat([cache, new], dim=-2)


def kv_attention_step(X_new, K_cache, V_cache, W_q, W_k, W_v, W_o,
                      n_heads):
    T = X_new.shape[-2]
    N = K_cache.shape[-2]
    # (..., T, D) -> (..., H, T, d)
    q, k, v = (
        (X_new @ W).unflatten(-1, (n_heads, -1)).transpose(-3, -2)
        for W in (W_q, W_k, W_v))
    K, V = extend(K_cache, k), extend(V_cache, v)
    sys = []
    for t in range(T):  # token t sees the cache and the new tokens <= t
        keys = K[..., :N + t + 1, :]
        s = q[..., t:t + 1, :] @ keys.transpose(-2, -1)
        A = torch.softmax(s / math.sqrt(q.shape[-1]), dim=-1)
        sys.append(A @ V[..., :N + t + 1, :])
    Y = torch.cat(sys, dim=-2).transpose(-3, -2).flatten(-2)
    return Y @ W_o, K, V
'''))
CORRECT["induction_scores"].append(
    ("a helper for the targets of one sequence, a local named os", '''
def targets(tokens):
    N = tokens.shape[-1]
    os = torch.zeros(N, N, dtype=torch.bool)
    for n in range(N):
        for j in range(1, n + 1):
            os[n, j] = bool(tokens[j - 1] == tokens[n])
    return os


def induction_scores(A, tokens):
    *batch, H, N, _ = A.shape
    flat_A, flat_t = A.reshape(-1, H, N, N), tokens.reshape(-1, N)
    scores = []
    for a, t in zip(flat_A, flat_t):
        T = targets(t)
        has = T.any(-1)
        mass = (a * T).sum(-1)  # (H, N)
        scores.append(mass[:, has].sum(-1) / has.sum())
    return torch.stack(scores).reshape(*batch, H)
'''))
