"""Catalogue of chapter 9, the encoder-decoder that generates (see
``tests/catalogue/__init__.py``)."""

CHAPTER_OF = {
    "teacher_forcing": "09_encoder_decoder",
    "DecoderLayer": "09_encoder_decoder",
    "greedy_decode": "09_encoder_decoder",
    "input_dependence": "09_encoder_decoder",
    "decoding_work": "09_encoder_decoder",
}

# A decoder layer on course_lib's parts whose forward is filled in.
_LAYER = '''
from course_lib.layers import FeedForward, LayerNorm
from course_lib.multihead import MultiHeadAttention

class DecoderLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model,
                                                 n_heads=n_heads)
        self.cross_attention = MultiHeadAttention(d_model=d_model,
                                                  n_heads=n_heads)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = LayerNorm(d_model=d_model)
        self.norm2 = LayerNorm(d_model=d_model)
        self.norm3 = LayerNorm(d_model=d_model)
        self.norm_first = norm_first

    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
%s
        return (Y, A_self, A_cross) if return_attention else Y
'''
_POST = '''
        if self.norm_first:
            H = self.norm1(X)
            a, A_self = self.self_attention(H, tgt_mask)
            Z = X + a
            c, A_cross = self.cross_attention(self.norm2(Z), %(cross)s)
            U = Z + c
            Y = U + self.feed_forward(self.norm3(U))
        else:
            a, A_self = self.self_attention(X, tgt_mask)
            Z = self.norm1(X + a)
            c, A_cross = self.cross_attention(Z, %(cross)s)
            U = self.norm2(Z + c)
            Y = self.norm3(U + self.feed_forward(U))'''
_RIGHT_CROSS = "memory_mask, context=memory"

# Greedy decoding, the loop's body filled in.
_DECODE = '''
def greedy_decode(model, src, *, bos_id, eos_id, pad_id, max_len):
    B = src.shape[0]
    out = torch.full((B, 1), bos_id, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
%s
    return out[:, 1:]
'''

# ------------------------------------------------------------ correct

CORRECT = {
    "teacher_forcing": [
        ("a loop over the rows", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B, T = words.shape
    inputs = torch.full((B, T + 1), pad_id, dtype=words.dtype)
    labels = torch.full((B, T + 1), pad_id, dtype=words.dtype)
    for b in range(B):
        sentence = [w for w in words[b].tolist() if w != pad_id]
        L = len(sentence)
        inputs[b, :L + 1] = torch.tensor([bos_id] + sentence)
        labels[b, :L + 1] = torch.tensor(sentence + [eos_id])
    return inputs, labels
'''),
        ("F.pad and a scatter of <eos>", '''
import torch.nn.functional as F
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    inputs = F.pad(words, (1, 0), value=bos_id)
    labels = F.pad(words, (0, 1), value=pad_id)
    ends = (words != pad_id).sum(dim=1, keepdim=True)
    labels = labels.scatter(1, ends, eos_id)
    return inputs, labels
'''),
        ("the labels as the input rolled left", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B = words.shape[0]
    first = torch.full((B, 1), bos_id, dtype=words.dtype)
    inputs = torch.cat((first, words), 1)
    labels = inputs.roll(-1, dims=1)
    labels[:, -1] = pad_id
    # the first padding position of each row becomes <eos>
    is_pad = labels == pad_id
    first_pad = is_pad & (is_pad.cumsum(1) == 1)
    labels[first_pad] = eos_id
    return inputs, labels
'''),
    ],
    "DecoderLayer": [
        ("course_lib's parts, both arrangements", _LAYER % (
            _POST % {"cross": _RIGHT_CROSS})),
        ("a loop over three sublayers, nn.LayerNorm", '''
from course_lib.layers import FeedForward
from course_lib.multihead import MultiHeadAttention

class DecoderLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model,
                                                 n_heads=n_heads)
        self.cross_attention = MultiHeadAttention(d_model=d_model,
                                                  n_heads=n_heads)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.pre = norm_first

    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
        weights = []
        def masked(Z):
            out, A = self.self_attention(Z, tgt_mask)
            weights.append(A)
            return out
        def cross(Z):
            out, A = self.cross_attention(Z, memory_mask, context=memory)
            weights.append(A)
            return out
        steps = [(masked, self.norm1), (cross, self.norm2),
                 (self.feed_forward, self.norm3)]
        for sublayer, norm in steps:
            if self.pre:
                X = X + sublayer(norm(X))
            else:
                X = norm(X + sublayer(X))
        if return_attention:
            return X, weights[0], weights[1]
        return X
'''),
    ],
    "greedy_decode": [
        ("the loop filled in", _DECODE % '''
        nxt = model(src, out)[:, -1].argmax(dim=-1)
        nxt[done] = pad_id
        out = torch.cat([out, nxt.unsqueeze(1)], dim=1)
        done |= nxt == eos_id
        if done.all():
            break'''),
        ("a preallocated buffer, cut at the end", '''
def greedy_decode(model, src, *, bos_id, eos_id, pad_id, max_len):
    B = src.shape[0]
    buffer = torch.full((B, max_len + 1), pad_id, dtype=torch.int64)
    buffer[:, 0] = bos_id
    ended = torch.zeros(B, dtype=torch.bool)
    t = 0
    while t < max_len and not bool(ended.all()):
        scores = model(src, buffer[:, :t + 1])
        best = scores[:, t].argmax(-1)
        buffer[:, t + 1] = torch.where(ended, pad_id, best)
        ended = ended | (best == eos_id)
        t += 1
    return buffer[:, 1:t + 1]
'''),
        ("one row at a time, padded together", '''
def greedy_decode(model, src, *, bos_id, eos_id, pad_id, max_len):
    rows = []
    for b in range(src.shape[0]):
        prefix = [bos_id]
        while len(prefix) <= max_len:
            logits = model(src[b:b + 1], torch.tensor([prefix]))
            token = int(logits[0, -1].argmax())
            prefix.append(token)
            if token == eos_id:
                break
        rows.append(prefix[1:])
    T = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (T - len(r)) for r in rows])
'''),
    ],
    "input_dependence": [
        ("a loop over positions, a copy each time", '''
def input_dependence(model, src, tgt):
    base = model(src, tgt)
    V = base.shape[-1]
    N = tgt.shape[1]
    D = torch.zeros(N, N, dtype=torch.bool)
    for m in range(N):
        other = tgt.clone()
        other[:, m] = (other[:, m] + 1) % V
        diff = (model(src, other) - base).abs()
        for n in range(N):
            D[n, m] = bool(diff[:, n].max() > 1e-6)
    return D
'''),
        ("every change in one batch, then compared", '''
def input_dependence(model, src, tgt):
    with torch.no_grad():
        base = model(src, tgt)
    B, N, V = base.shape
    # copy m of the batch has position m changed: (N * B, N_t)
    many = tgt.repeat(N, 1)
    rows = torch.arange(N * B)
    cols = torch.arange(N).repeat_interleave(B)
    many[rows, cols] = (many[rows, cols] + 1) % V
    out = model(src.repeat(N, 1), many).reshape(N, B, N, V)
    moved = (out - base).abs().amax(dim=(1, 3))  # (m, n)
    return (moved > 1e-6).T
'''),
        ("changed in place, then put back", '''
def input_dependence(model, src, tgt):
    base = model(src, tgt).detach()
    V = base.shape[2]
    columns = []
    for m in range(tgt.shape[1]):
        saved = tgt[:, m].clone()
        tgt[:, m] = (saved + 1) % V
        moved = ~torch.isclose(model(src, tgt), base, rtol=0, atol=1e-6)
        tgt[:, m] = saved
        columns.append(moved.any(dim=2).any(dim=0))
    return torch.stack(columns, dim=1)
'''),
    ],
    "decoding_work": [
        ("sums written out", '''
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    encoder = n_source * n_encoder_layers
    if cache == "none":
        encoder *= n_new
    if cache == "memory+kv":
        decoder = n_new * n_decoder_layers
    else:
        decoder = n_decoder_layers * sum(range(1, n_new + 1))
    return encoder, decoder
'''),
        ("a loop over the steps", '''
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    enc = dec = 0
    for t in range(1, n_new + 1):
        if cache == "none" or t == 1:
            enc += n_source * n_encoder_layers
        rows = 1 if cache == "memory+kv" else t
        dec += rows * n_decoder_layers
    return enc, dec
'''),
    ],
}

# --------------------------------------------------------- misconceptions

WRONG = {
    "teacher_forcing": [
        ("targets not shifted", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B = words.shape[0]
    bos = torch.full((B, 1), bos_id, dtype=words.dtype)
    inputs = torch.cat([bos, words], dim=1)
    return inputs, inputs.clone()
'''),
        ("<eos> at the end of the padded row", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B = words.shape[0]
    bos = torch.full((B, 1), bos_id, dtype=words.dtype)
    eos = torch.full((B, 1), eos_id, dtype=words.dtype)
    return torch.cat([bos, words], 1), torch.cat([words, eos], 1)
'''),
        ("<eos> in the decoder input", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B, T = words.shape
    labels = torch.cat([words, torch.full((B, 1), pad_id)], 1)
    labels[torch.arange(B), (words != pad_id).sum(1)] = eos_id
    inputs = torch.cat([torch.full((B, 1), bos_id), labels[:, :-1]], 1)
    return inputs, labels
'''),
        ("the input and the labels swapped", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B, T = words.shape
    labels = torch.cat([words, torch.full((B, 1), pad_id)], 1)
    labels[torch.arange(B), (words != pad_id).sum(1)] = eos_id
    inputs = torch.cat([torch.full((B, 1), bos_id), words], 1)
    return labels, inputs
'''),
        ("padding labelled <eos>", '''
def teacher_forcing(words, *, bos_id, eos_id, pad_id):
    B, T = words.shape
    labels = torch.cat([words, torch.full((B, 1), pad_id)], 1)
    labels[labels == pad_id] = eos_id
    inputs = torch.cat([torch.full((B, 1), bos_id), words], 1)
    return inputs, labels
'''),
    ],
    "DecoderLayer": [
        ("a causal mask on the cross-attention", _LAYER % (
            "        N_t, N_s = X.shape[-2], memory.shape[-2]\n"
            "        tri = torch.ones(N_t, N_s, dtype=torch.bool).tril()\n"
            "        if memory_mask is not None:\n"
            "            tri = tri & memory_mask\n"
            + _POST % {"cross": "tri, context=memory"})),
        ("queries taken from the encoder", _LAYER % (
            _POST % {"cross": "None, context=memory"}).replace(
            "self.cross_attention(self.norm2(Z), None, context=memory)",
            "self.cross_attention(memory, None, context=self.norm2(Z))")
            .replace("self.cross_attention(Z, None, context=memory)",
                     "self.cross_attention(memory, None, context=Z)")),
        ("the causal mask is ignored", _LAYER % (
            _POST % {"cross": _RIGHT_CROSS}).replace(
            "self.self_attention(H, tgt_mask)",
            "self.self_attention(H)").replace(
            "self.self_attention(X, tgt_mask)", "self.self_attention(X)")),
        ("the source padding mask is ignored", _LAYER % (
            _POST % {"cross": "context=memory"})),
        ("norm_first ignored", _LAYER % (
            _POST % {"cross": _RIGHT_CROSS}).replace(
            "if self.norm_first:", "if True:")),
        ("keys and values from the decoder", _LAYER % (
            _POST % {"cross": "tgt_mask"})),
    ],
    "greedy_decode": [
        ("finished rows keep generating", _DECODE % '''
        nxt = model(src, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break'''),
        ("the scores of the first position instead of the last",
         _DECODE % '''
        nxt = model(src, out)[:, 0].argmax(dim=-1)
        nxt[done] = pad_id
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break'''),
        ("generation stops when the first row ends", _DECODE % '''
        nxt = model(src, out)[:, -1].argmax(dim=-1)
        out = torch.cat([out, nxt[:, None]], dim=1)
        if (nxt == eos_id).any():
            break'''),
        ("generation does not stop when every row has produced <eos>",
         _DECODE % '''
        nxt = model(src, out)[:, -1].argmax(dim=-1)
        nxt[done] = pad_id
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id'''),
        ("<bos> kept in the output", _DECODE.replace(
            "return out[:, 1:]", "return out") % '''
        nxt = model(src, out)[:, -1].argmax(dim=-1)
        nxt[done] = pad_id
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break'''),
    ],
    "input_dependence": [
        ("rows and columns swapped", '''
def input_dependence(model, src, tgt):
    base = model(src, tgt)
    V, N = base.shape[-1], tgt.shape[1]
    D = torch.zeros(N, N, dtype=torch.bool)
    for m in range(N):
        other = tgt.clone()
        other[:, m] = (other[:, m] + 1) % V
        D[m] = (model(src, other) - base).abs().amax(dim=(0, 2)) > 1e-6
    return D
'''),
        ("the input not restored between measurements", '''
def input_dependence(model, src, tgt):
    base = model(src, tgt)
    V, N = base.shape[-1], tgt.shape[1]
    D = torch.zeros(N, N, dtype=torch.bool)
    work = tgt.clone()
    for m in range(N):
        work[:, m] = (work[:, m] + 1) % V
        D[:, m] = (model(src, work) - base).abs().amax(dim=(0, 2)) > 1e-6
    return D
'''),
        ("only the changed position is examined", '''
def input_dependence(model, src, tgt):
    base = model(src, tgt)
    V, N = base.shape[-1], tgt.shape[1]
    D = torch.zeros(N, N, dtype=torch.bool)
    for m in range(N):
        other = tgt.clone()
        other[:, m] = (other[:, m] + 1) % V
        D[m, m] = bool((model(src, other) - base)[:, m].abs().max() > 1e-6)
    return D
'''),
        ("the caller's tgt modified in place", '''
def input_dependence(model, src, tgt):
    base = model(src, tgt)
    V, N = base.shape[-1], tgt.shape[1]
    D = torch.zeros(N, N, dtype=torch.bool)
    for m in range(N):
        original = tgt.clone()
        tgt[:, m] = (original[:, m] + 1) % V
        D[:, m] = (model(src, tgt) - base).abs().amax(dim=(0, 2)) > 1e-6
    return D
'''),
    ],    "decoding_work": [
        ("the encoder counted once although nothing is kept", '''
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    dec = n_new if cache == "memory+kv" else n_new * (n_new + 1) // 2
    return n_source * n_encoder_layers, dec * n_decoder_layers
'''),
        ("the prefix counted without <bos>", '''
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    runs = n_new if cache == "none" else 1
    dec = n_new if cache == "memory+kv" else n_new * (n_new - 1) // 2
    return runs * n_source * n_encoder_layers, dec * n_decoder_layers
'''),
        ("one layer per stack", '''
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    runs = n_new if cache == "none" else 1
    dec = n_new if cache == "memory+kv" else n_new * (n_new + 1) // 2
    return runs * n_source, dec
'''),
        ("the keys and values kept spare nothing", '''
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    runs = n_new if cache == "none" else 1
    dec = n_new * (n_new + 1) // 2
    return runs * n_source * n_encoder_layers, dec * n_decoder_layers
'''),
    ],
}

# -------------------------------------------------------------- cheats
# (label, exercise, source, what the message must say)

CHEATS = [
    ("course_lib's decoding_work", "decoding_work", '''
from course_lib import seq2seq as _s
def decoding_work(n_source, n_new, n_encoder_layers, n_decoder_layers, *,
                  cache="none"):
    return _s.decoding_work(n_source, n_new, n_encoder_layers,
                            n_decoder_layers, cache=cache)
''', "course_lib's decoding_work"),
    ("course_lib's input_dependence", "input_dependence", '''
from course_lib.seq2seq import input_dependence as _measure
def input_dependence(model, src, tgt):
    return _measure(model, src, tgt)
''', "course_lib's input_dependence"),
    ("course_lib's greedy_decode under an alias", "greedy_decode", '''
from course_lib import seq2seq as _s
_go = _s.greedy_decode
def greedy_decode(model, src, *, bos_id, eos_id, pad_id, max_len):
    return _go(model, src, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id,
               max_len=max_len)
''', "course_lib's greedy_decode"),
    ("a subclass of the reference DecoderLayer", "DecoderLayer", '''
from course_lib.seq2seq import DecoderLayer as _Reference
class DecoderLayer(_Reference):
    pass
''', "course_lib's DecoderLayer"),
    ("PyTorch's decoder layer inside", "DecoderLayer", '''
class DecoderLayer(nn.Module):
    def __init__(self, *, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.inner = nn.TransformerDecoderLayer(d_model, n_heads, d_ff,
                                                dropout=0.0,
                                                batch_first=True,
                                                norm_first=norm_first)
    def forward(self, X, memory, tgt_mask=None, memory_mask=None, *,
                return_attention=False):
        return self.inner(X, memory)
''', "TransformerDecoderLayer"),
]

NOTEBOOK_CHEATS = []
