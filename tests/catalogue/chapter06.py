"""Catalogue of chapter 6 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    "sinusoidal_encoding": "06_positional_encoding",
    "relative_position_matrix": "06_positional_encoding",
    "apply_rotary": "06_positional_encoding",
    "RotaryAttention": "06_positional_encoding",
}


def _rotary_module(*, before="", after_split="", scale="d", mask=True):
    """A RotaryAttention subclass with one place changed: ``before``
    rotates before the split, ``after_split`` after it (the default turns
    the queries and keys of each head)."""
    after_split = after_split or (
        "        Q, K = ref.apply_rotary(Q), ref.apply_rotary(K)\n")
    masking = ("        if mask is not None:\n"
               "            S = S.masked_fill(~mask[..., None, :, :], "
               "float('-inf'))\n") if mask else ""
    return (
        "\nfrom course_lib import multihead as ref_multihead\n"
        "from course_lib import positional as ref\n"
        "class RotaryAttention(ref_multihead.MultiHeadAttention):\n"
        "    def forward(self, X, mask=None):\n"
        "        H = self.n_heads\n"
        "        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)\n"
        + before +
        "        Q, K, V = (ref_multihead.split_heads(T, H)\n"
        "                   for T in (Q, K, V))\n"
        + after_split +
        f"        S = Q @ K.transpose(-2, -1) / math.sqrt("
        f"{'self.d_head' if scale == 'd' else 'X.shape[-1]'})\n"
        + masking +
        "        A = torch.softmax(S, dim=-1)\n"
        "        return self.W_o(ref_multihead.merge_heads(A @ V)), A\n")


# ------------------------------------------------------------ correct

CORRECT = {
    "sinusoidal_encoding": [
        ("Python loops over positions and pairs", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    rows = []
    for pos in range(n_positions):
        row = []
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32).reshape(
        n_positions, d_model)
'''),
        ("exp-log frequencies in float32, stacked and flattened", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    omega = torch.exp(two_i * (-math.log(base) / d_model))
    angle = pos * omega
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)
'''),
        ("complex exponentials (torch.polar), real and imaginary parts", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float64)
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = torch.outer(pos, base ** (-2 * i / d_model))
    z = torch.polar(torch.ones_like(angle), angle)  # cos + i sin
    pairs = torch.view_as_real(z).flip(-1)  # (..., [sin, cos])
    return pairs.reshape(n_positions, d_model).float()
'''),
    ],
    "relative_position_matrix": [
        ("torch.block_diag of 2 x 2 rotations", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    blocks = []
    for i in range(d_model // 2):
        a = offset / base ** (2 * i / d_model)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)],
                                    [math.sin(a), math.cos(a)]]))
    return torch.block_diag(*blocks).float()
'''),
        ("kron of the identity, masks and float64 inside", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    half = d_model // 2
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = offset * torch.exp(-two_i / d_model * math.log(base))
    cos = torch.kron(torch.diag(torch.cos(angle)), torch.eye(2,
                     dtype=torch.float64))
    sin = torch.kron(torch.diag(torch.sin(angle)),
                     torch.tensor([[0.0, -1.0], [1.0, 0.0]],
                                  dtype=torch.float64))
    assert cos.shape == (2 * half, 2 * half)
    return (cos + sin).to(torch.float32)
'''),
    ],
    "apply_rotary": [
        ("complex numbers: each pair a + i b turned by e^(i n omega)", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2:]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    turn = torch.polar(torch.ones_like(angle), angle)
    z = torch.complex(Z[..., 0::2].double(), Z[..., 1::2].double()) * turn
    out = torch.stack([z.real, z.imag], dim=-1).flatten(-2)
    return out.to(Z.dtype)
'''),
        ("one block-diagonal matrix per position, columns (slow but right)",
         '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    rows = []
    for n in range(N):
        blocks = []
        for i in range(d // 2):
            a = n / base ** (2 * i / d)
            blocks.append(torch.tensor([[math.cos(a), -math.sin(a)],
                                        [math.sin(a), math.cos(a)]],
                                       dtype=torch.float64))
        R = torch.block_diag(*blocks).to(Z.dtype)  # acts on columns
        rows.append((R @ Z[..., n, :, None])[..., 0])
    return torch.stack(rows, dim=-2)
'''),
        ("sines and cosines read off an encoding, float32 throughout", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    pos = torch.arange(N, dtype=Z.dtype)[:, None]
    omega = torch.exp(torch.arange(0, d, 2, dtype=Z.dtype)
                      * (-math.log(base) / d))
    sin, cos = torch.sin(pos * omega), torch.cos(pos * omega)
    out = torch.empty_like(Z)
    out[..., 0::2] = Z[..., 0::2] * cos - Z[..., 1::2] * sin
    out[..., 1::2] = Z[..., 1::2] * cos + Z[..., 0::2] * sin
    return out
'''),
    ],
    "RotaryAttention": [
        ("a subclass: split, rotate, attend, merge", _rotary_module()),
        ("from nn.Module, a loop over heads, complex rotation", '''
class RotaryAttention(nn.Module):
    def __init__(self, *, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    @staticmethod
    def turn(Z):
        N, d = Z.shape[-2:]
        w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        t = torch.arange(N, dtype=torch.float64)[:, None] * w
        z = torch.complex(Z[..., 0::2].double(), Z[..., 1::2].double())
        z = z * torch.polar(torch.ones_like(t), t)
        return torch.stack([z.real, z.imag], -1).flatten(-2).to(Z.dtype)

    def forward(self, X, mask=None):
        d = X.shape[-1] // self.n_heads
        Q, K, V = self.W_q(X), self.W_k(X), self.W_v(X)
        outs, weights = [], []
        for h in range(self.n_heads):
            cols = slice(h * d, (h + 1) * d)
            q, k = self.turn(Q[..., cols]), self.turn(K[..., cols])
            S = q @ k.transpose(-2, -1) / d ** 0.5
            if mask is not None:
                S = torch.where(mask, S, torch.full_like(S, -1e9))
            A = S.softmax(dim=-1)
            outs.append(A @ V[..., cols])
            weights.append(A)
        return self.W_o(torch.cat(outs, dim=-1)), torch.stack(weights, -3)
'''),
        ("a subclass with unflatten and the reference attention", '''
from course_lib import attention as _attention
from course_lib import multihead as ref_multihead
from course_lib import positional as ref
class RotaryAttention(ref_multihead.MultiHeadAttention):
    def forward(self, X, mask=None, return_attention=True):
        H = self.n_heads
        def heads(T):  # (..., N, D) -> (..., H, N, d_head)
            return T.unflatten(-1, (H, -1)).transpose(-3, -2)
        Q = ref.apply_rotary(heads(self.W_q(X)))
        K = ref.apply_rotary(heads(self.W_k(X)))
        if mask is not None:
            mask = mask.unsqueeze(-3)
        out, A = _attention.scaled_dot_product_attention(
            Q, K, heads(self.W_v(X)), mask)
        Y = self.W_o(out.transpose(-3, -2).flatten(-2))
        return (Y, A) if return_attention else Y
'''),
    ],
}

# --------------------------------------------------------- misconceptions

WRONG = {
    "sinusoidal_encoding": [
        ("sine and cosine halves concatenated instead of interleaved", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    angle = pos * omega
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
'''),
        ("sine and cosine swapped", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    PE = torch.zeros(n_positions, d_model)
    PE[:, 0::2] = torch.cos(pos * omega)
    PE[:, 1::2] = torch.sin(pos * omega)
    return PE
'''),
        ("exponent uses the dimension index instead of the pair index", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    PE = torch.zeros(n_positions, d_model)
    for pos in range(n_positions):
        for j in range(d_model):
            angle = pos / base ** (2 * j / d_model)
            PE[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return PE
'''),
        ("exponent uses the dimension index instead of the pair index", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    div = base ** (torch.arange(d_model, dtype=torch.float32) / d_model)
    PE = torch.zeros(n_positions, d_model)
    PE[:, 0::2] = torch.sin(pos / div[0::2])
    PE[:, 1::2] = torch.cos(pos / div[1::2])
    return PE
'''),
        ("the base is ignored (always 10000)", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2) / d_model)
    PE = torch.zeros(n_positions, d_model)
    PE[:, 0::2] = torch.sin(pos * omega)
    PE[:, 1::2] = torch.cos(pos * omega)
    return PE
'''),
        ("positions counted from 1", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(1, n_positions + 1, dtype=torch.float32)[:, None]
    omega = base ** (-torch.arange(0, d_model, 2) / d_model)
    PE = torch.zeros(n_positions, d_model)
    PE[:, 0::2] = torch.sin(pos * omega)
    PE[:, 1::2] = torch.cos(pos * omega)
    return PE
'''),
        ("exponent i/d_model instead of 2i/d_model", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = base ** (-torch.arange(d_model // 2) / d_model)
    PE = torch.zeros(n_positions, d_model)
    PE[:, 0::2] = torch.sin(pos * omega)
    PE[:, 1::2] = torch.cos(pos * omega)
    return PE
'''),
        ("pos multiplied by base^(2i/d_model) instead of divided", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos * base ** (two_i / d_model)
    PE = torch.zeros(n_positions, d_model, dtype=torch.float64)
    PE[:, 0::2] = torch.sin(angle)
    PE[:, 1::2] = torch.cos(angle)
    return PE.float()
'''),
        ("expected dtype torch.float32", '''
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / base ** (two_i / d_model)
    PE = torch.zeros(n_positions, d_model, dtype=torch.float64)
    PE[:, 0::2] = torch.sin(angle)
    PE[:, 1::2] = torch.cos(angle)
    return PE  # float64: the exercise asks for float32
'''),
    ],
    "relative_position_matrix": [
        ("the rotation is transposed", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        a = offset / base ** (2 * i / d_model)
        M[2 * i, 2 * i] = math.cos(a)
        M[2 * i, 2 * i + 1] = math.sin(a)
        M[2 * i + 1, 2 * i] = -math.sin(a)
        M[2 * i + 1, 2 * i + 1] = math.cos(a)
    return M
'''),
        ("the base is ignored (always 10000)", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        a = offset / 10000.0 ** (2 * i / d_model)
        M[2 * i, 2 * i] = math.cos(a)
        M[2 * i, 2 * i + 1] = -math.sin(a)
        M[2 * i + 1, 2 * i] = math.sin(a)
        M[2 * i + 1, 2 * i + 1] = math.cos(a)
    return M
'''),
        ("exponent uses the dimension index instead of the pair index", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    M = torch.zeros(d_model, d_model)
    for j in range(0, d_model, 2):
        a = offset / base ** (2 * j / d_model)
        M[j, j] = math.cos(a)
        M[j, j + 1] = -math.sin(a)
        M[j + 1, j] = math.sin(a)
        M[j + 1, j + 1] = math.cos(a)
    return M
'''),
        ("blocks pair dimension i with i + d_model/2", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    half = d_model // 2
    M = torch.zeros(d_model, d_model)
    for i in range(half):
        a = offset / base ** (2 * i / d_model)
        M[i, i] = math.cos(a)
        M[i, i + half] = -math.sin(a)
        M[i + half, i] = math.sin(a)
        M[i + half, i + half] = math.cos(a)
    return M
'''),
        ("exponent i/d_model instead of 2i/d_model", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = offset * base ** (-i / d_model)
    c, s = torch.cos(angle), torch.sin(angle)
    even = torch.arange(0, d_model, 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[even, even] = c
    M[even, even + 1] = -s
    M[even + 1, even] = s
    M[even + 1, even + 1] = c
    return M.float()
'''),
        ("expected dtype torch.float32", '''
def relative_position_matrix(offset, d_model, base=10000.0):
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = offset * base ** (-2 * i / d_model)
    c, s = torch.cos(angle), torch.sin(angle)
    even = torch.arange(0, d_model, 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[even, even] = c
    M[even, even + 1] = -s
    M[even + 1, even] = s
    M[even + 1, even + 1] = c
    return M
'''),
    ],
    "apply_rotary": [
        ("the rotation is transposed", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(Z.dtype), angle.sin().to(Z.dtype)
    a, b = Z[..., 0::2], Z[..., 1::2]
    return torch.stack([a * cos + b * sin, b * cos - a * sin],
                       dim=-1).flatten(-2)
'''),
        ("pairs i and i + d/2 rotated together", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(Z.dtype), angle.sin().to(Z.dtype)
    a, b = Z[..., : d // 2], Z[..., d // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
'''),
        ("positions counted from 1", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(1, N + 1, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(Z.dtype), angle.sin().to(Z.dtype)
    a, b = Z[..., 0::2], Z[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin],
                       dim=-1).flatten(-2)
'''),
        ("exponent uses the dimension index instead of the pair index", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    j = torch.arange(0, d, 2, dtype=torch.float64)
    omega = base ** (-2 * j / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(Z.dtype), angle.sin().to(Z.dtype)
    a, b = Z[..., 0::2], Z[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin],
                       dim=-1).flatten(-2)
'''),
        ("exponent i/d instead of 2i/d", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    omega = base ** (-torch.arange(d // 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(Z.dtype), angle.sin().to(Z.dtype)
    a, b = Z[..., 0::2], Z[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin],
                       dim=-1).flatten(-2)
'''),
        ("the base is ignored (always 10000)", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    out = torch.empty_like(Z)
    for n in range(N):
        for i in range(d // 2):
            t = n / 10000.0 ** (2 * i / d)
            a, b = Z[..., n, 2 * i], Z[..., n, 2 * i + 1]
            out[..., n, 2 * i] = a * math.cos(t) - b * math.sin(t)
            out[..., n, 2 * i + 1] = b * math.cos(t) + a * math.sin(t)
    return out
'''),
        ("the sinusoidal encoding added instead of a rotation", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    PE = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)
    return Z + PE.to(Z.dtype)
'''),
        ("the sinusoidal encoding multiplied entry by entry", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * omega
    PE = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)
    return Z * PE.to(Z.dtype)
'''),
        ("positions counted along the first axis", '''
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[0], Z.shape[-1]  # the first axis taken as positions
    pos = torch.arange(N, dtype=torch.float64)
    pos = pos.reshape((N,) + (1,) * (Z.dim() - 1))
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = pos * w
    c, s = torch.cos(angle).to(Z.dtype), torch.sin(angle).to(Z.dtype)
    a, b = Z[..., 0::2], Z[..., 1::2]
    out = torch.empty_like(Z)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out
'''),
        ("expected dtype torch.float64", '''
def apply_rotary(Z, base=10000.0):
    Z = Z.float()  # float64 in, float32 out
    N, d = Z.shape[-2], Z.shape[-1]
    pos = torch.arange(N, dtype=torch.float32)[:, None]
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    c, s = torch.cos(pos * w), torch.sin(pos * w)
    a, b = Z[..., 0::2], Z[..., 1::2]
    out = torch.empty_like(Z)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out
'''),
    ],
}

WRONG["RotaryAttention"] = [
    ("the whole projected vector rotated before the heads are split",
     _rotary_module(before="        Q, K = ref.apply_rotary(Q), "
                    "ref.apply_rotary(K)\n", after_split="\n")),
    ("the tokens rotated before the projections", '''
from course_lib import multihead as ref_multihead
from course_lib import positional as ref
class RotaryAttention(ref_multihead.MultiHeadAttention):
    def forward(self, X, mask=None):
        X = ref.apply_rotary(X)  # positions turned into the tokens
        return super().forward(X, mask)
'''),
    ("the values rotated too", _rotary_module(
        after_split="        Q, K, V = (ref.apply_rotary(T) for T in "
                    "(Q, K, V))\n")),
    ("only the queries rotated", _rotary_module(
        after_split="        Q = ref.apply_rotary(Q)\n")),
    ("only the keys rotated", _rotary_module(
        after_split="        K = ref.apply_rotary(K)\n")),
    ("rotated the wrong way", _rotary_module(
        after_split="        sign = torch.tensor([1.0, -1.0]).repeat("
                    "Q.shape[-1] // 2).to(Q.dtype)\n"
                    "        Q = ref.apply_rotary(Q * sign) * sign\n"
                    "        K = ref.apply_rotary(K * sign) * sign\n")),
    ("scaled by sqrt(d_model) instead of sqrt(d_head)",
     _rotary_module(scale="D")),
    ("the mask is ignored", _rotary_module(mask=False)),
]

# -------------------------------------------------------------- cheats
# (label, exercise, source, what the message must say)

CHEATS = [
    ("course_lib's sinusoidal_encoding under an alias",
     "sinusoidal_encoding", '''
from course_lib.positional import sinusoidal_encoding as _reference
def sinusoidal_encoding(n_positions, d_model, base=10000.0):
    return _reference(n_positions, d_model, base)
''', "course_lib's sinusoidal_encoding"),
    ("course_lib's relative_position_matrix through its module",
     "relative_position_matrix", '''
import course_lib.positional as _positional
def relative_position_matrix(offset, d_model, base=10000.0):
    return _positional.relative_position_matrix(offset, d_model, base)
''', "course_lib's relative_position_matrix"),
    ("course_lib's apply_rotary under an alias", "apply_rotary", '''
from course_lib import positional as _p
_turn = _p.apply_rotary
def apply_rotary(Z, base=10000.0):
    return _turn(Z, base)
''', "course_lib's apply_rotary"),
    ("course_lib's relative_position_matrix, one per position",
     "apply_rotary", '''
from course_lib.positional import relative_position_matrix as _M
def apply_rotary(Z, base=10000.0):
    N, d = Z.shape[-2], Z.shape[-1]
    rows = [Z[..., n, :] @ _M(-n, d, base, dtype=Z.dtype)
            for n in range(N)]
    return torch.stack(rows, dim=-2)
''', "course_lib's relative_position_matrix"),
    ("course_lib's RotaryAttention as the base class", "RotaryAttention",
     '''
from course_lib.positional import RotaryAttention as _Reference
class RotaryAttention(_Reference):
    pass
''', "course_lib's RotaryAttention"),
]
