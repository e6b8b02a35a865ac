"""Catalogue of chapter 5 (see ``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    "attention_flops": "05_complexity",
    "crossover_length": "05_complexity",
    "decoding_flops": "05_complexity",
    "attention_memory_bytes": "05_complexity",
    "fit_power_law": "05_complexity",
}

# ------------------------------------------------------------ correct

CORRECT = {
    "attention_flops": [
        ("a loop over heads with a matmul helper", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    def mm(a, b, c):
        return 2 * a * b * c
    N, D, d = n_tokens, d_model, d_model // n_heads
    counts = {"projections": 0, "scores": 0, "weighted_sum": 0}
    for _ in ("Q", "K", "V"):
        counts["projections"] += mm(N, D, D)
    for _ in range(n_heads):
        counts["scores"] += mm(N, d, N)
        counts["weighted_sum"] += mm(N, N, d)
    counts["output_projection"] = mm(N, D, D)
    counts["total"] = sum(counts.values())
    return counts
'''),
        ("closed forms with a float d_head", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D, H = n_tokens, d_model, n_heads
    d_head = D / H
    out = dict(projections=6 * N * D * D,
               scores=H * 2 * N * N * d_head,
               weighted_sum=H * 2 * N * N * d_head,
               output_projection=2 * N * D * D)
    out["total"] = 8 * N * D**2 + 4 * N**2 * D
    return out
'''),
        ("torch's FlopCounterMode on meta tensors", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    from torch.utils.flop_counter import FlopCounterMode
    N, D, H = n_tokens, d_model, n_heads
    X = torch.empty(N, D, device="meta")
    W = torch.empty(D, D, device="meta")
    counts = {}
    with FlopCounterMode(display=False) as fc:
        Q = X @ W
        K, V = X @ W, X @ W
    counts["projections"] = fc.get_total_flops()
    Qh = Q.reshape(N, H, D // H).transpose(0, 1)
    with FlopCounterMode(display=False) as fc:
        A = Qh @ Qh.transpose(-2, -1)
    counts["scores"] = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        A @ Qh
    counts["weighted_sum"] = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        X @ W
    counts["output_projection"] = fc.get_total_flops()
    counts["total"] = sum(counts.values())
    return counts
'''),
    ],
    "crossover_length": [
        ("2 D + d_ff", '''
def crossover_length(d_model, d_ff=0):
    return 2 * d_model + d_ff
'''),
        ("the first N at which the N^2 terms catch up, by search", '''
def crossover_length(d_model, d_ff=0):
    D, N = d_model, 1
    while 4 * N * N * D < 8 * N * D * D + 4 * N * D * d_ff:
        N += 1
    return N
'''),
        ("from course_lib's attention_flops plus the FFN (allowed)", '''
from course_lib.complexity import attention_flops as _counts
def crossover_length(d_model, d_ff=0):
    c = _counts(1, d_model)
    ffn = 2 * 2 * d_model * d_ff
    linear = c["projections"] + c["output_projection"] + ffn
    return linear / (c["scores"] + c["weighted_sum"])
'''),
        ("FlopCounterMode on a meta-device layer", '''
from torch.utils.flop_counter import FlopCounterMode
def crossover_length(d_model, d_ff=0):
    D = d_model
    X = torch.empty(1, D, device="meta")
    with FlopCounterMode(display=False) as fc:
        for _ in range(4):
            X @ torch.empty(D, D, device="meta")
        if d_ff:
            h = X @ torch.empty(D, d_ff, device="meta")
            h @ torch.empty(d_ff, D, device="meta")
    linear = fc.get_total_flops()
    quadratic = 2 * 2 * D  # QK^T and AV at N = 1
    return linear / quadratic
'''),
    ],
    "decoding_flops": [
        ("a loop over the steps", '''
def decoding_flops(n_prompt, n_new, d_model):
    D = d_model
    total = 0
    for step in range(n_new):
        L = n_prompt + step + 1  # keys in the cache, the new one included
        total += 4 * 2 * D * D  # q, k, v and W_o for one token
        total += 2 * 2 * L * D  # q K^T and A V over all heads
    return total
'''),
        ("a closed form (sum of an arithmetic series)", '''
def decoding_flops(n_prompt, n_new, d_model):
    P, n, D = n_prompt, n_new, d_model
    first, last = P + 1, P + n
    return 8 * n * D**2 + 4 * D * (first + last) * n // 2
'''),
        ("the difference of two triangular numbers, with numpy", '''
import numpy as np
def decoding_flops(n_prompt, n_new, d_model):
    def tri(k):
        return k * (k + 1) // 2
    L_sum = tri(n_prompt + n_new) - tri(n_prompt)
    return int(np.int64(8) * n_new * d_model**2 + 4 * d_model * L_sum)
'''),
    ],
    "attention_memory_bytes": [
        ("math.prod of the shape", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    return math.prod((n_heads, n_tokens, n_tokens, bytes_per_element))
'''),
        ("a meta tensor of the right dtype", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    dtype = {1: torch.uint8, 2: torch.float16, 4: torch.float32,
             8: torch.float64}[bytes_per_element]
    A = torch.empty(n_heads, n_tokens, n_tokens, dtype=dtype,
                    device="meta")
    return A.numel() * A.element_size()
'''),
    ],
    "fit_power_law": [
        ("least squares by hand with sums", '''
def fit_power_law(xs, ys):
    lx = [math.log(float(x)) for x in xs]
    ly = [math.log(float(y)) for y in ys]
    n = len(lx)
    mx, my = sum(lx) / n, sum(ly) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    sxx = sum((a - mx) ** 2 for a in lx)
    p = sxy / sxx
    return p, math.exp(my - p * mx)
'''),
        ("torch.linalg.lstsq in float32", '''
def fit_power_law(xs, ys):
    x = torch.as_tensor(xs, dtype=torch.float32).log()
    y = torch.as_tensor(ys, dtype=torch.float32).log()
    M = torch.stack([x, torch.ones_like(x)], dim=1)
    p, b = torch.linalg.lstsq(M, y[:, None]).solution[:, 0]
    return p.item(), b.exp().item()
'''),
        ("np.polyfit on log10 (polyfit is allowed)", '''
import numpy as np
def fit_power_law(xs, ys):
    p, b = np.polyfit(np.log10(np.asarray(xs, dtype=float)),
                      np.log10(np.asarray(ys, dtype=float)), 1)
    return float(p), float(10 ** b)
'''),
        ("scipy.stats.linregress", '''
import numpy as np
from scipy.stats import linregress
def fit_power_law(xs, ys):
    r = linregress(np.log(np.asarray(xs, dtype=float)),
                   np.log(np.asarray(ys, dtype=float)))
    return r.slope, np.exp(r.intercept)
'''),
    ],
}

# --------------------------------------------------------- misconceptions

WRONG = {
    "attention_flops": [
        ("a multiply-add counted as 1 FLOP", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    c = {"projections": 3 * N * D * D, "scores": N * N * D,
         "weighted_sum": N * N * D, "output_projection": N * D * D}
    c["total"] = sum(c.values())
    return c
'''),
        ("the output projection is left out of the total", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    c = {"projections": 6 * N * D * D, "scores": 2 * N * N * D,
         "weighted_sum": 2 * N * N * D}
    c["total"] = sum(c.values())
    c["output_projection"] = 2 * N * D * D
    return c
'''),
        ("Q K^T counted with d_model per head (H times too many)", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D, H = n_tokens, d_model, n_heads
    c = {"projections": 6 * N * D * D}
    c["scores"] = H * 2 * N * D * N
    c["weighted_sum"] = H * 2 * N * N * (D // H)
    c["output_projection"] = 2 * N * D * D
    c["total"] = sum(c.values())
    return c
'''),
        ("the weighted sum counted as O(N D), as in the notes", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    c = {"projections": 6 * N * D * D, "scores": 2 * N * N * D,
         "weighted_sum": 2 * N * D, "output_projection": 2 * N * D * D}
    c["total"] = sum(c.values())
    return c
'''),
        ("additions counted as b - 1 per output", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    def mm(a, b, c):
        return a * c * (b + (b - 1))
    N, D, H = n_tokens, d_model, n_heads
    d = D // H
    c = {"projections": 3 * mm(N, D, D), "scores": H * mm(N, d, N),
         "weighted_sum": H * mm(N, N, d), "output_projection": mm(N, D, D)}
    c["total"] = sum(c.values())
    return c
'''),
        ("Q K^T counted as N D^2, as in the notes' label", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    c = {"projections": 6 * N * D * D, "scores": 2 * N * D * D,
         "weighted_sum": 2 * N * N * D, "output_projection": 2 * N * D * D}
    c["total"] = sum(c.values())
    return c
'''),
        ("one projection counted instead of three", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    c = {"projections": 2 * N * D * D, "scores": 2 * N * N * D,
         "weighted_sum": 2 * N * N * D, "output_projection": 2 * N * D * D}
    c["total"] = sum(c.values())
    return c
'''),
        ("the scores and weighted sum of one head only", '''
def attention_flops(n_tokens, d_model, n_heads=1):
    N, D = n_tokens, d_model
    d_head = D // n_heads
    c = {"projections": 6 * N * D * D,
         "scores": 2 * N * d_head * N,  # (N, d_head) @ (d_head, N)
         "weighted_sum": 2 * N * N * d_head,
         "output_projection": 2 * N * D * D}
    c["total"] = sum(c.values())
    return c
'''),
    ],
    "crossover_length": [
        ("the feed-forward block is left out", '''
def crossover_length(d_model, d_ff=0):
    return 2 * d_model
'''),
        ("the feed-forward block counted as one product", '''
def crossover_length(d_model, d_ff=0):
    N_D2 = 8 * d_model ** 2 + 2 * d_model * d_ff
    return N_D2 / (4 * d_model)
'''),
        ("the feed-forward products counted as D x D", '''
def crossover_length(d_model, d_ff=0):
    products = 4 + (2 if d_ff else 0)  # W_q, W_k, W_v, W_o (+ W_1, W_2)
    return 2 * products * d_model / 4
'''),
        ("the output projection is left out", '''
def crossover_length(d_model, d_ff=0):
    return (6 * d_model ** 2 + 4 * d_model * d_ff) / (4 * d_model)
'''),
        ("the constants are dropped (N D^2 = N^2 D)", '''
def crossover_length(d_model, d_ff=0):
    return d_model + d_ff
'''),
        ("only Q K^T counted as an N^2 term", '''
def crossover_length(d_model, d_ff=0):
    return (8 * d_model ** 2 + 4 * d_model * d_ff) / (2 * d_model)
'''),
    ],
    "decoding_flops": [
        ("no KV cache: the whole layer rerun at every step", '''
def decoding_flops(n_prompt, n_new, d_model):
    D = d_model
    return sum(8 * L * D * D + 4 * L * L * D
               for L in range(n_prompt + 1, n_prompt + n_new + 1))
'''),
        ("the new token does not attend to itself", '''
def decoding_flops(n_prompt, n_new, d_model):
    D = d_model
    return sum(8 * D * D + 4 * L * D
               for L in range(n_prompt, n_prompt + n_new))
'''),
        ("the output projection is left out", '''
def decoding_flops(n_prompt, n_new, d_model):
    P, n, D = n_prompt, n_new, d_model
    return 6 * n * D * D + 2 * D * n * (2 * P + n + 1)
'''),
        ("the weighted sum over the cache is left out", '''
def decoding_flops(n_prompt, n_new, d_model):
    D = d_model
    return sum(8 * D * D + 2 * L * D
               for L in range(n_prompt + 1, n_prompt + n_new + 1))
'''),
        ("the projections of every cached token recomputed", '''
def decoding_flops(n_prompt, n_new, d_model):
    D = d_model
    return sum(8 * L * D * D + 4 * L * D
               for L in range(n_prompt + 1, n_prompt + n_new + 1))
'''),
        ("the prompt's own pass is counted", '''
def decoding_flops(n_prompt, n_new, d_model):
    P, n, D = n_prompt, n_new, d_model
    prompt = 8 * P * D * D + 4 * P * P * D
    return prompt + 8 * n * D * D + 2 * D * n * (2 * P + n + 1)
'''),
    ],
    "attention_memory_bytes": [
        ("bytes per element ignored (4 assumed)", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    return n_heads * n_tokens * n_tokens * 4
'''),
        ("memory without the head factor", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    return n_tokens ** 2 * bytes_per_element
'''),
        ("elements counted instead of bytes", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    return n_heads * n_tokens ** 2
'''),
        ("bits counted instead of bytes", '''
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    bits = 8 * bytes_per_element
    return n_heads * n_tokens ** 2 * bits
'''),
    ],
    "fit_power_law": [
        ("a line fitted in linear space", '''
import numpy as np
def fit_power_law(xs, ys):
    slope, intercept = np.polyfit(np.asarray(xs, dtype=float),
                                  np.asarray(ys, dtype=float), 1)
    return slope, intercept
'''),
        ("exponent and coefficient swapped", '''
import numpy as np
def fit_power_law(xs, ys):
    p, b = np.polyfit(np.log(np.asarray(xs, dtype=float)),
                      np.log(np.asarray(ys, dtype=float)), 1)
    return np.exp(b), p
'''),
        ("the coefficient returned as its log", '''
import numpy as np
def fit_power_law(xs, ys):
    return tuple(np.polyfit(np.log(np.asarray(xs, dtype=float)),
                            np.log(np.asarray(ys, dtype=float)), 1))
'''),
        ("only the first and last points used", '''
def fit_power_law(xs, ys):
    x0, x1 = math.log(float(xs[0])), math.log(float(xs[-1]))
    y0, y1 = math.log(float(ys[0])), math.log(float(ys[-1]))
    p = (y1 - y0) / (x1 - x0)
    return p, math.exp(y0 - p * x0)
'''),
        ("the coefficient undone with the wrong log base", '''
import numpy as np
def fit_power_law(xs, ys):
    p, b = np.polyfit(np.log10(np.asarray(xs, dtype=float)),
                      np.log10(np.asarray(ys, dtype=float)), 1)
    return float(p), float(np.exp(b))
'''),
        ("log x fitted against log y (axes swapped)", '''
import numpy as np
def fit_power_law(xs, ys):
    log_x = np.log(np.asarray(xs, dtype=float))
    log_y = np.log(np.asarray(ys, dtype=float))
    p, b = np.polyfit(log_y, log_x, 1)
    return float(p), float(np.exp(b))
'''),
    ],
}

# -------------------------------------------------------------- cheats
# (label, exercise, source, what the message must say)

CHEATS = [
    ("the course_lib reference", "attention_flops", '''
from course_lib import complexity as _ref
def attention_flops(n_tokens, d_model, n_heads=1):
    return dict(_ref.attention_flops(n_tokens, d_model, n_heads))
''', "course_lib's attention_flops"),
    ("the course_lib reference", "crossover_length", '''
from course_lib.complexity import crossover_length as _ref
def crossover_length(d_model, d_ff=0):
    return _ref(d_model, d_ff)
''', "course_lib's crossover_length"),
    ("the course_lib reference", "decoding_flops", '''
from course_lib import complexity as _c
def decoding_flops(n_prompt, n_new, d_model):
    return _c.decoding_flops(n_prompt, n_new, d_model)
''', "course_lib's decoding_flops"),
    ("the course_lib reference", "attention_memory_bytes", '''
import course_lib.complexity
def attention_memory_bytes(n_tokens, n_heads=1, bytes_per_element=4):
    return course_lib.complexity.attention_memory_bytes(
        n_tokens, n_heads, bytes_per_element)
''', "course_lib's attention_memory_bytes"),
    ("the course_lib reference", "fit_power_law", '''
from course_lib.complexity import fit_power_law as _fit
def fit_power_law(xs, ys):
    return _fit(xs, ys)
''', "course_lib's fit_power_law"),
    ("a float that equals everything", "crossover_length", '''
class _Liar(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__
def crossover_length(d_model, d_ff=0):
    return _Liar(0.0)
''', "_Liar"),
    ("a dict that equals everything", "attention_flops", '''
class _Liar(dict):
    def __eq__(self, other):
        return True
    __hash__ = None
def attention_flops(n_tokens, d_model, n_heads=1):
    return _Liar(projections=0, scores=0, weighted_sum=0,
                 output_projection=0, total=0)
''', "expected a dict"),
]
