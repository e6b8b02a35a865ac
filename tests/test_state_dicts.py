"""Tests for course_lib.state_dicts: a Llama-style model loaded from
Hugging Face's state dict equals ``LlamaForCausalLM`` (built from a small
random config, nothing downloaded); CS336's names and a mapping of one's
own; the round trip; bad input named."""

import pytest
import torch

from course_lib import state_dicts as sd
from course_lib.llama import LlamaModel

transformers = pytest.importorskip("transformers")


def hf_model(seed=0, **options):
    torch.manual_seed(seed)
    init = dict(vocab_size=37, hidden_size=32, intermediate_size=48,
                num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64,
                rms_norm_eps=1e-6, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default",
                                 "rope_theta": 500.0})
    init.update(options)
    return transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**init)).eval()


@pytest.mark.parametrize("tied", [False, True])
def test_hugging_faces_state_dict_gives_their_logits(tied):
    hf = hf_model(tie_word_embeddings=tied)
    ours = sd.from_state_dict(hf.state_dict(), n_heads=4, max_len=64,
                              theta=500.0)
    assert (ours.output.weight is ours.token_embedding.weight) == tied
    assert ours.layers[0].attention.n_kv_heads == 2
    tokens = torch.randint(37, (3, 11))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits,
                                   atol=2e-6, rtol=1e-5)
    # and back: their model loads what we write, strictly
    again = hf_model(seed=9, tie_word_embeddings=tied)
    again.load_state_dict(sd.to_state_dict(ours, "hf"))
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).logits, hf(tokens).logits)


def cs336_state_dict(model):
    """What CS336's TransformerLM holds, written by hand from its
    handout's names (not through the module's mapping)."""
    out = {"token_embeddings.weight": model.token_embedding.weight,
           "ln_final.weight": model.norm.weight,
           "lm_head.weight": model.output.weight}
    for i, block in enumerate(model.layers):
        a, f = block.attention, block.feed_forward
        out |= {f"layers.{i}.ln1.weight": block.norm1.weight,
                f"layers.{i}.ln2.weight": block.norm2.weight,
                f"layers.{i}.attn.q_proj.weight": a.W_q.weight,
                f"layers.{i}.attn.k_proj.weight": a.W_k.weight,
                f"layers.{i}.attn.v_proj.weight": a.W_v.weight,
                f"layers.{i}.attn.output_proj.weight": a.W_o.weight,
                f"layers.{i}.ffn.w1.weight": f.W_gate.weight,
                f"layers.{i}.ffn.w2.weight": f.W_down.weight,
                f"layers.{i}.ffn.w3.weight": f.W_up.weight}
    return {k: v.detach().clone() for k, v in out.items()}


def test_cs336s_names_and_a_mapping_of_ones_own():
    torch.manual_seed(0)
    model = LlamaModel(vocab_size=50, max_len=32, d_model=16, n_heads=4,
                       d_ff=24, n_layers=3, theta=1e4, eps=1e-5).eval()
    state = cs336_state_dict(model)
    loaded = sd.from_state_dict(state, names="cs336", n_heads=4,
                                max_len=32, theta=1e4, eps=1e-5)
    tokens = torch.randint(50, (2, 9))
    with torch.no_grad():
        assert torch.equal(loaded(tokens), model(tokens))
    assert sd.to_state_dict(loaded, "cs336").keys() == state.keys()
    # the same under names of one's own (CS336's, spelt out)
    mine = {ours: theirs.replace("layers.{i}.", "blocks.{i}.")
            for ours, theirs in sd.CS336_NAMES.items()}
    renamed = {k.replace("layers.", "blocks."): v for k, v in state.items()}
    other = LlamaModel(vocab_size=50, max_len=32, d_model=16, n_heads=4,
                       d_ff=24, n_layers=3, theta=1e4, eps=1e-5).eval()
    sd.load_state_dict(other, renamed, mine)
    with torch.no_grad():
        assert torch.equal(other(tokens), model(tokens))


def test_bad_state_dicts_are_named():
    hf = hf_model()
    state = hf.state_dict()
    model = sd.from_state_dict(state, n_heads=4, max_len=64, theta=500.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    missing = dict(state)
    del missing["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="lacks.*up_proj"):
        sd.load_state_dict(model, missing)
    with pytest.raises(ValueError, match="does not name.*extra"):
        sd.load_state_dict(model, {**state, "extra.weight": torch.ones(1)})
    wrong = {**state, "model.norm.weight": torch.ones(31)}
    with pytest.raises(ValueError, match="model.norm.weight.*shape"):
        sd.load_state_dict(model, wrong)
    for k, v in model.state_dict().items():  # nothing was copied
        assert torch.equal(v, before[k])
    with pytest.raises(ValueError, match="names must be"):
        sd.load_state_dict(model, state, "gpt2")
    with pytest.raises(ValueError, match="rotary_pairs"):
        sd.load_state_dict(model, state, rotary_pairs="halves")
    with pytest.raises(ValueError, match="n_heads"):
        sd.from_state_dict(state, n_heads=5, max_len=64)


def test_a_bfloat16_checkpoint_is_widened_to_float32():
    """A 16-bit checkpoint (as the hub ships them) gives a float32 model
    holding exactly its numbers, and Hugging Face's model widened the
    same way gives the same logits."""
    hf = hf_model(seed=3).to(torch.bfloat16)
    half = hf.state_dict()
    ours = sd.from_state_dict(half, n_heads=4, max_len=64, theta=500.0)
    assert ours.token_embedding.weight.dtype == torch.float32
    assert torch.equal(ours.token_embedding.weight,
                       half["model.embed_tokens.weight"].float())
    tokens = torch.randint(37, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf.float()(tokens).logits,
                                   atol=2e-6, rtol=1e-5)
