"""Checks of chapter 9: the encoder-decoder that generates. Sentences
are ``words (B, T)`` of symbol indices padded on the right; the decoder's
input and labels are ``(B, T + 1)``; ``DecoderLayer`` maps ``X (..., N_t,
D)`` and ``memory (..., N_s, D)`` to ``(..., N_t, D)`` and, on request,
self-attention ``(..., H, N_t, N_t)`` and cross-attention ``(..., H, N_t,
N_s)`` weights; ``greedy_decode`` returns ``(B, T_out)`` tokens."""

import functools

import torch

from course_lib import number_words as ref_words
from course_lib import seq2seq as ref
from course_lib.attention import causal_mask
from course_lib.grading.common import (
    F32,
    F64,
    TORCH_ATTENTION,
    generator,
    mixing_model,
    randn,
    scripted_model,
    symbol_model,
)
from course_lib.grading.engine import Case, Exercise, Misconception
from course_lib.grading.families import Family

# --------------------------------------------------------- teacher forcing


def _forcing_with(words, *, bos_id, eos_id, pad_id, labels_shifted=True,
                  swapped=False, eos_at_end=False, eos_in_input=False,
                  eos_padding=False):
    """Teacher forcing with one thing changed."""
    B, T = words.shape
    lengths = (words != pad_id).sum(dim=1)
    column = torch.full((B, 1), pad_id, dtype=words.dtype)
    labels = torch.cat([words, column], dim=1)
    if eos_at_end:
        labels[:, -1] = eos_id
    else:
        labels[torch.arange(B), lengths] = eos_id
    if eos_padding:
        labels[labels == pad_id] = eos_id
    bos = torch.full((B, 1), bos_id, dtype=words.dtype)
    decoder_input = torch.cat([bos, words], dim=1)
    if eos_in_input:
        decoder_input = torch.cat([bos, labels[:, :-1]], dim=1)
    if not labels_shifted:
        labels = decoder_input.clone()
    if swapped:
        return labels, decoder_input
    return decoder_input, labels


def _wrong_forcing(name, advice, **options):
    return Misconception(
        name, advice,
        lambda words, **ids: _forcing_with(words, **ids, **options))


def forcing_cases(specs, seed):
    """One case per ``(label, lengths, T, vocab, (bos, eos, pad))``: random
    word indices (none of the specials) padded after each length."""
    cases = []
    for i, (label, lengths, T, vocab, ids) in enumerate(specs):
        bos, eos, pad = ids
        g = generator(seed + i)
        words = torch.randint(0, vocab, (len(lengths), T), generator=g)
        special = torch.tensor(ids)
        # remap the specials to other words
        while bool(torch.isin(words, special).any()):
            hit = torch.isin(words, special)
            words[hit] = torch.randint(0, vocab, (int(hit.sum()),),
                                       generator=g)
        words[torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None]] \
            = pad
        cases.append(Case(label, (words,), kwargs=dict(
            bos_id=bos, eos_id=eos, pad_id=pad)))
    return cases


TEACHER_FORCING = Exercise(
    name="teacher_forcing",
    reference=ref_words.teacher_forcing,
    visible=lambda: forcing_cases([
        ("three sentences of 4, 2 and 3 words (T = 4)", [4, 2, 3], 4, 12,
         (1, 2, 0)),
        ("one sentence of one word", [1], 3, 9, (1, 2, 0)),
    ], seed=900),
    outputs=("decoder input", "labels"),
    misconceptions=(
        _wrong_forcing(
            "targets not shifted",
            "the label at position n is the token that FOLLOWS input n: "
            "labels = w_1 .. w_L <eos>, one step ahead of the input "
            "<bos> w_1 .. w_L. Labels equal to the inputs teach the model "
            "to copy its input.", labels_shifted=False),
        _wrong_forcing(
            "the input and the labels swapped",
            "the decoder reads <bos> w_1 .. w_L and must predict w_1 .. "
            "w_L <eos>.", swapped=True),
        _wrong_forcing(
            "<eos> at the end of the padded row",
            "put <eos> right after each sentence's last word (position L "
            "of the labels), not in the last column: a short sentence "
            "would otherwise learn to predict padding before its <eos>.",
            eos_at_end=True),
        _wrong_forcing(
            "<eos> in the decoder input",
            "the decoder input is <bos> w_1 .. w_L then padding; <eos> is "
            "only ever a label (nothing is predicted after it).",
            eos_in_input=True),
        _wrong_forcing(
            "padding labelled <eos>",
            "after <eos> the labels are pad_id, so that the loss can "
            "ignore them (ignore_index=pad_id).", eos_padding=True),
    ),
    forbidden_reference=(ref_words.teacher_forcing,),
    shortcut_advice="Build both tensors with torch.cat and indexing.",
)

# ------------------------------------------------------------ decoder layer


def _decoder_with(layer, X, memory, tgt_mask=None, memory_mask=None, *,
                  causal_cross=False, queries_from_memory=False,
                  ignore_tgt_mask=False, ignore_memory_mask=False,
                  cross_first=False, pre=None, from_normed=False,
                  residual=True, self_twice=False):
    """A decoder layer with one thing changed; returns ``(Y, A_self,
    A_cross)``."""
    pre = {None: layer.norm_first, "swap": not layer.norm_first}.get(pre)
    if from_normed and not pre:
        raise ValueError("this mistake is about pre-LN")
    N_t, N_s = X.shape[-2], memory.shape[-2]
    if ignore_tgt_mask:
        tgt_mask = None
    if ignore_memory_mask:
        memory_mask = None
    if causal_cross:
        tril = torch.ones(N_t, N_s, dtype=torch.bool).tril()
        memory_mask = tril if memory_mask is None else memory_mask & tril
    out = {}

    def self_block(Z):
        Y, out["self"] = layer.self_attention(Z, tgt_mask)
        return Y

    def cross_block(Z):
        if queries_from_memory:
            Y, A = layer.cross_attention(memory, None, context=Z)
        elif self_twice:
            Y, A = layer.cross_attention(Z, tgt_mask)
        else:
            Y, A = layer.cross_attention(Z, memory_mask, context=memory)
        out["cross"] = A
        return Y

    blocks = [cross_block, self_block] if cross_first \
        else [self_block, cross_block]
    norms = [layer.norm1, layer.norm2]
    Z = X
    for block, norm in zip(blocks, norms, strict=True):
        if pre:
            H = norm(Z)
            Z = (H if from_normed else Z) * residual + block(H)
        else:
            Z = norm(Z * residual + block(Z))
    if pre:
        H = layer.norm3(Z)
        Y = (H if from_normed else Z) * residual + layer.feed_forward(H)
    else:
        Y = layer.norm3(Z * residual + layer.feed_forward(Z))
    return Y, out["self"], out["cross"]


def _wrong_decoder(name, advice, **options):
    return Misconception(name, advice,
                         lambda layer, *a: _decoder_with(layer, *a,
                                                         **options))


def decoder_cases(specs, seed):
    """One case per ``(label, init, B, N_t, N_s, dtype, lengths)``:
    seeded ``X`` and ``memory``, a causal target mask and, when
    ``lengths`` is given, a source padding mask ``(B, 1, N_s)``."""
    cases = []
    for i, (label, init, B, N_t, N_s, dtype, lengths) in enumerate(specs):
        D = init["d_model"]
        X = randn(B, N_t, D, seed=seed + i, dtype=dtype)
        memory = randn(B, N_s, D, seed=seed + 40 + i, dtype=dtype)
        memory_mask = None
        if lengths is not None:
            memory_mask = (torch.arange(N_s)[None, :]
                           < torch.tensor(lengths)[:, None])[:, None, :]
        cases.append(Case(label, (X, memory, causal_mask(N_t),
                                  memory_mask), init=init))
    return cases


def _three(results):
    """``module(...)`` and ``module(..., return_attention=True)`` as
    ``(Y, A_self, A_cross)``."""
    from course_lib.grading.engine import GradingError, describe

    Y, both = results
    if type(both) is not tuple or len(both) != 3:
        raise GradingError(
            "DecoderLayer(..., return_attention=True) should return a "
            "tuple (Y, A_self, A_cross); got " + describe(both))
    return Y, both[1], both[2]


def _queries_side(case, outputs):
    X, memory = case.args[0], case.args[1]
    Y = outputs[0]
    if (type(Y) is torch.Tensor and Y.dim() >= 2
            and X.shape[-2] != memory.shape[-2]
            and Y.shape[-2] == memory.shape[-2]):
        return ("your output has one row per source token (N_s), not per "
                "target token.\nLikely mistake: queries taken from the "
                "encoder. In cross-attention the decoder asks (queries "
                "from the decoder's stream), the encoder answers (keys "
                "and values from memory): cross_attention(Z, mask, "
                "context=memory).")
    return None


def _init(d_model, n_heads, d_ff, norm_first=None):
    init = {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff}
    if norm_first is not None:
        init["norm_first"] = norm_first
    return init


def _post_ln(case):
    """A family's ``member``: the layers built post-LN (the default)."""
    return not case.init.get("norm_first", False)


DECODER_LAYER = Exercise(
    name="DecoderLayer",
    reference=ref.DecoderLayer,
    module=True,
    seed=910,
    calls=({}, {"return_attention": True}),
    assemble=_three,
    outputs=("output", "self-attention weights", "cross-attention weights"),
    parameter_advice=(
        "Use self_attention and cross_attention = MultiHeadAttention "
        "(W_q, W_k, W_v, W_o), feed_forward = a FeedForward (linear1, "
        "linear2), norm1, norm2, norm3 = LayerNorm(d_model=...), and no "
        "other parameters."),
    families=(Family("post-LN (norm_first=False)", 2, _post_ln),
              Family("pre-LN (norm_first=True)", 1)),
    visible=lambda: decoder_cases([
        ("post-LN, 5 target and 5 source tokens", _init(8, 2, 16), 2, 5, 5,
         F32, None),
        ("pre-LN, 4 target and 6 source tokens, source padding",
         _init(8, 2, 16, True), 3, 4, 6, F32, [6, 3, 5]),
        ("post-LN in float64, 3 target and 4 source tokens, padding",
         _init(8, 2, 16, False), 2, 3, 4, F64, [4, 2]),
    ], seed=920),
    misconceptions=(
        _wrong_decoder(
            "a causal mask on the cross-attention",
            "only the decoder's self-attention is causal (it must not "
            "read tokens it has not produced yet); the whole source is "
            "known from the start, so the cross-attention masks only the "
            "source's padding (memory_mask).", causal_cross=True),
        _wrong_decoder(
            "queries taken from the encoder",
            "the cross-attention's queries come from the decoder, its "
            "keys and values from memory: cross_attention(Z, memory_mask, "
            "context=memory).", queries_from_memory=True),
        _wrong_decoder(
            "the causal mask is ignored",
            "pass tgt_mask to the self-attention: without it position n "
            "reads the tokens after it, which generation does not have.",
            ignore_tgt_mask=True),
        _wrong_decoder(
            "the source padding mask is ignored",
            "pass memory_mask to the cross-attention, so that no query "
            "reads a padded source token.", ignore_memory_mask=True),
        _wrong_decoder(
            "cross-attention before self-attention",
            "the order is masked self-attention (norm1), then "
            "cross-attention (norm2), then the feed-forward network "
            "(norm3).", cross_first=True),
        _wrong_decoder(
            "keys and values from the decoder, not from memory",
            "the second attention reads the encoder's output: "
            "context=memory.", self_twice=True),
        _wrong_decoder(
            "norm_first ignored (post-LN and pre-LN swapped)",
            "norm_first=False is post-LN, Z = LN_1(X + MHA(X)); "
            "norm_first=True is pre-LN, Z = X + MHA(LN_1(X)).",
            pre="swap"),
        _wrong_decoder(
            "pre-LN residual taken from the normalised input",
            "pre-LN adds each sublayer to its un-normalised input: "
            "Z = X + MHA(LN_1(X)).", from_normed=True),
        _wrong_decoder(
            "no residual connections",
            "each sublayer's input is added back to its output.",
            residual=False),
    ),
    properties=(_queries_side,),
    forbidden_torch=TORCH_ATTENTION,
    forbidden_reference=(ref.DecoderLayer, ref.TransformerDecoder,
                         ref.Transformer, ref.Seq2SeqTransformer),
    shortcut_advice=("Assemble the layer from self_attention, "
                     "cross_attention, feed_forward and the three norms."),
)

# ------------------------------------------------------------ greedy decode


def _chain(V, steps, seed):
    """``(first, table)`` for :func:`scripted_model`: the next token is
    ``steps[token]`` (``steps[-1]`` for what follows <bos>, by source
    symbol), as a clear argmax among seeded noise."""
    g = generator(seed)
    table = torch.rand(V, V, generator=g, dtype=torch.float64)
    for token, nxt in steps["next"].items():
        table[token, nxt] = 2.0 + table[token, nxt]
    first = torch.rand(V, V, generator=g, dtype=torch.float64)
    for symbol, nxt in steps["start"].items():
        first[symbol, nxt] = 2.0 + first[symbol, nxt]
    return first.to(F32), table.to(F32)


def decode_cases(specs, seed):
    """One case per ``(label, V, steps, src first symbols, ids,
    max_len)``."""
    cases = []
    for i, (label, V, steps, starts, ids, max_len) in enumerate(specs):
        first, table = _chain(V, steps, seed + i)
        model = functools.partial(scripted_model, first=first, table=table)
        src = torch.tensor([[s, 3] for s in starts])
        bos, eos, pad = ids
        cases.append(Case(label, (model, src), kwargs=dict(
            bos_id=bos, eos_id=eos, pad_id=pad, max_len=max_len)))
    return cases


# tokens 0 pad, 1 bos, 2 eos; 3 -> 4 -> 5 -> eos; 6 -> eos; 7 -> 7 ...
_STEPS = {"start": {3: 3, 4: 6, 5: 7, 6: 4},
          "next": {0: 5, 1: 3, 2: 6, 3: 4, 4: 5, 5: 2, 6: 2, 7: 7}}


# tokens 0 eos, 1 bos, 2 pad here; 3 -> 4 -> eos, 5 -> 6 -> 7 -> eos
_OTHER_IDS = {"start": {3: 3, 4: 5, 5: 6, 6: 3, 7: 7},
              "next": {0: 4, 1: 3, 2: 3, 3: 4, 4: 0, 5: 6, 6: 7, 7: 0}}


def _decode_with(model, src, *, bos_id, eos_id, pad_id, max_len,
                 stop="all", pad_finished=True, keep_bos=False,
                 position=-1, keep_eos=True):
    """Greedy decoding with one thing changed."""
    B = src.shape[0]
    prefix = torch.full((B, 1), bos_id, dtype=torch.int64)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        nxt = model(src, prefix)[:, position].argmax(-1)
        if pad_finished:
            nxt = torch.where(done, pad_id, nxt)
        prefix = torch.cat([prefix, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if (stop == "all" and done.all()) or (stop == "any" and done.any()):
            break
    out = prefix if keep_bos else prefix[:, 1:]
    if not keep_eos:
        out = torch.where(out == eos_id, pad_id, out)
    return out


def _wrong_decode(name, advice, **options):
    return Misconception(name, advice,
                         lambda *a, **k: _decode_with(*a, **k, **options))


def _decode_shape(case, outputs):
    """Name the mistakes that change the number of columns."""
    got = outputs[0]
    if type(got) is not torch.Tensor or got.dim() != 2:
        return None
    model, src = case.args
    k = case.kwargs
    want = ref.greedy_decode(model, src, **k).shape[1]
    T = got.shape[1]
    if T == want:
        return None
    if T == want + 1 and bool((got[:, 0] == k["bos_id"]).all()):
        return ("your tokens start with <bos>.\nLikely mistake: <bos> "
                "kept in the output. Return the generated tokens only, "
                "prefix[:, 1:].")
    if T == k["max_len"] and want < T:
        return (f"you return max_len = {T} columns, the reference "
                f"{want}.\nLikely mistake: generation does not stop when "
                "every row has produced <eos>. Stop as soon as all rows "
                "are finished.")
    if T < want:
        return (f"you return {T} columns, the reference {want}.\nLikely "
                "mistake: generation stops when the first row ends. "
                "Keep going (padding the finished rows) until every row "
                "has produced <eos>, or max_len tokens.")
    return None


GREEDY_DECODE = Exercise(
    name="greedy_decode",
    reference=ref.greedy_decode,
    visible=lambda: decode_cases([
        ("rows ending after 4 and 2 tokens, max_len 6", 8, _STEPS, [3, 4],
         (1, 2, 0), 6),
        ("one row never ends: cut at max_len 5", 8, _STEPS, [3, 5, 4],
         (1, 2, 0), 5),
        ("a single row, max_len 1", 8, _STEPS, [5], (1, 2, 0), 1),
        ("other special ids: eos 0, pad 2", 8, _OTHER_IDS, [3, 5],
         (1, 0, 2), 6),
    ], seed=940),
    misconceptions=(
        _wrong_decode(
            "finished rows keep generating",
            "once a row has produced <eos>, write pad_id in it for the "
            "rest of the batch's steps.", pad_finished=False),
        _wrong_decode(
            "the scores of the first position instead of the last",
            "model(src, prefix) scores the token after every position; "
            "the next token is the argmax at the LAST position, "
            "logits[:, -1].", position=0),
        _wrong_decode(
            "<eos> dropped from the output",
            "keep each row's <eos> (pad only after it): it says where the "
            "sentence ends.", keep_eos=False),
    ),
    properties=(_decode_shape,),
    forbidden_reference=(ref.greedy_decode,),
    shortcut_advice=("Write the loop yourself: call model(src, prefix), "
                     "take the argmax, append it."),
    slow_hint=("Likely cause: a generation loop whose end is never "
               "reached (one that waits for every row to produce <eos>, "
               "with no max_len)."),
)

# ------------------------------------------------------- input dependence


def dependence_cases(specs, seed):
    """One case per ``(label, reads pattern, B, N_t, V)``; the pattern is
    ``"causal"``, ``"future"`` (the transposed mask), ``"one ahead"``,
    ``"random"``, ``"by row"``: a :func:`symbol_model` whose rows read
    after random patterns of their own and react to one symbol only
    (which the first target position of every row is one below, so that
    a change there lowers the logits), or ``"tiny"``: the same with moves
    between 1.2e-6 and 1.8e-6, just above the threshold."""
    cases = []
    for i, (label, pattern, B, N, V) in enumerate(specs):
        g = generator(seed + i)
        src = torch.randint(0, V, (B, 3), generator=g)
        tgt = torch.randint(0, V, (B, N), generator=g)
        if pattern in ("by row", "tiny"):
            src[:, 0] = torch.randperm(V, generator=g)[:B]  # rows differ
            reads = torch.rand(V, N, N, generator=g) < 0.5
            reads[:, :, 0] = True  # every position reads position 0
            symbol = int(torch.randint(1, V, (), generator=g))
            tgt[:, 0] = symbol - 1
            weights = 0.5 + torch.rand(V, generator=g, dtype=F64)
            if pattern == "tiny":  # 1.2e-6 .. 1.8e-6
                weights = (0.7 + 0.6 * (weights - 0.5)) * 1e-6 + 5e-7
            model = functools.partial(symbol_model, reads=reads,
                                      symbol=symbol, weights=weights)
            cases.append(Case(label, (model, src, tgt)))
            continue
        ones = torch.ones(N, N, dtype=torch.bool)
        reads = {"causal": ones.tril(), "future": ones.triu(),
                 "one ahead": ones.tril(1),
                 "random": torch.rand(N, N, generator=g) < 0.5}[pattern]
        table = torch.randn(V, V, generator=g, dtype=torch.float64)
        model = functools.partial(mixing_model, reads=reads,
                                  table=table.to(F32))
        cases.append(Case(label, (model, src, tgt)))
    return cases


def _dependence_with(model, src, tgt, *, transposed=False, restore=True,
                     own_only=False, first_row=False):
    """The measurement with one thing changed."""
    base = model(src, tgt)
    B, N, V = base.shape
    D = torch.zeros(N, N, dtype=torch.bool)
    work = tgt.clone()
    for m in range(N):
        changed = tgt.clone() if restore else work
        changed[:, m] = (tgt[:, m] + 1) % V
        moved = (model(src, changed) - base).abs()  # (B, N_t, V)
        if first_row:
            moved = moved[:1]
        moved = moved.amax(dim=(0, 2)) > 1e-6
        if own_only:
            D[m, m] = moved[m]
        else:
            D[:, m] = moved
    return D.T.contiguous() if transposed else D


def _wrong_dependence(name, advice, **options):
    return Misconception(name, advice,
                         lambda *a: _dependence_with(*a, **options))


def _tgt_unchanged(case, outputs, after):
    if len(after) > 2 and (type(after[2]) is not torch.Tensor
                           or not torch.equal(after[2], case.args[2])):
        return ("the tgt you were given changed.\nLikely mistake: the "
                "caller's tgt modified in place. Change a copy "
                "(tgt.clone()) so that the caller's batch, and your next "
                "measurement, start from the original tokens.")
    return None


INPUT_DEPENDENCE = Exercise(
    name="input_dependence",
    reference=ref.input_dependence,
    visible=lambda: dependence_cases([
        ("a causal model, 4 positions", "causal", 2, 4, 7),
        ("a model that reads the future, 5 positions", "future", 3, 5, 9),
        ("a causal model, a batch of one, 3 positions", "causal", 1, 3, 6),
        ("rows that read differently, one symbol that counts", "by row",
         3, 5, 7),
        ("moves just above 1e-6", "tiny", 2, 4, 6),
    ], seed=980),
    inputs_after=_tgt_unchanged,
    misconceptions=(
        _wrong_dependence(
            "rows and columns swapped",
            "D[n, m] is about position n's scores (the row) reading input "
            "m (the column): change input m, then fill column m with the "
            "positions whose logits moved.", transposed=True),
        _wrong_dependence(
            "the input not restored between measurements",
            "change one position at a time, starting each time from the "
            "original tgt: otherwise the changes pile up and column m also "
            "shows what the earlier changes moved.", restore=False),
        _wrong_dependence(
            "only the changed position is examined",
            "a change at position m can move the scores of every position; "
            "compare all N_t positions, not only position m.",
            own_only=True),
        _wrong_dependence(
            "only the first row of the batch is examined",
            "the rows of a batch can read different positions: D[n, m] is "
            "True when the logits of position n move in SOME row, so "
            "compare every row (amax over the batch axis too).",
            first_row=True),
    ),
    forbidden_reference=(ref.input_dependence,),
    shortcut_advice=("Measure it: change one target position at a time and "
                     "compare the model's logits."),
)

# ------------------------------------------------------ decoding work


def _work_with(n_source, n_new, n_enc, n_dec, *, cache="none",
               encoder_once=False, without_bos=False, one_layer=False,
               kv_spares_nothing=False):
    """The work of greedy decoding with one thing changed."""
    encoder_runs = 1 if cache != "none" or encoder_once else n_new
    if cache == "memory+kv" and not kv_spares_nothing:
        decoder_rows = n_new
    elif without_bos:
        decoder_rows = n_new * (n_new - 1) // 2
    else:
        decoder_rows = n_new * (n_new + 1) // 2
    if one_layer:
        n_enc = n_dec = 1
    return encoder_runs * n_source * n_enc, decoder_rows * n_dec


def _wrong_work(name, advice, **options):
    return Misconception(name, advice,
                         lambda *a, **k: _work_with(*a, **k, **options))


def work_cases(specs):
    """One case per ``(label, n_source, n_new, n_enc, n_dec, cache)``."""
    return [Case(label, (n_source, n_new, n_enc, n_dec),
                 kwargs=dict(cache=cache))
            for label, n_source, n_new, n_enc, n_dec, cache in specs]


DECODING_WORK = Exercise(
    name="decoding_work",
    reference=ref.decoding_work,
    outputs=("encoder_rows", "decoder_rows"),
    visible=lambda: work_cases([
        ("6 digits, 10 words, 2 + 2 layers, no cache", 6, 10, 2, 2,
         "none"),
        ("5 source tokens, 3 new, 1 + 4 layers, the memory kept", 5, 3, 1,
         4, "memory"),
        ("7 source tokens, 4 new, 3 + 2 layers, memory and keys and "
         "values kept", 7, 4, 3, 2, "memory+kv"),
        ("4 source tokens, 1 new, 2 + 1 layers, no cache", 4, 1, 2, 1,
         "none"),
    ]),
    misconceptions=(
        _wrong_work(
            "the encoder counted once although nothing is kept",
            "greedy_decode calls model(src, prefix) at every step, and "
            "the model runs its encoder on the source each time.",
            encoder_once=True),
        _wrong_work(
            "the prefix counted without <bos>",
            "step t reads <bos> and the t - 1 tokens written before it: "
            "t rows, 1 at the first step.", without_bos=True),
        _wrong_work(
            "one layer per stack",
            "every layer of a stack computes the rows it is given: "
            "multiply by the number of layers.", one_layer=True),
        _wrong_work(
            "the keys and values kept spare nothing",
            "with every decoder layer's keys and values kept, a step "
            "feeds only the newest token: one row per layer.",
            kv_spares_nothing=True),
    ),
    forbidden_reference=(ref.decoding_work,),
    shortcut_advice="Derive the counts; course_lib's decoding_work is not "
                    "allowed.",
    integer=True,  # the text asks for two ints
)

EXERCISES = (TEACHER_FORCING, DECODER_LAYER, GREEDY_DECODE,
             INPUT_DEPENDENCE, DECODING_WORK)
