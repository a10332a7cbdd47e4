"""Poolers on a hand-computed example, and Ditto's weights against attention recomputed by hand."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from indexes.errors import InputError
from retrieval.dense.pooling import POOLERS, UnknownPoolingError, canonical_name, ditto_weights, get_pooler


@pytest.fixture(scope="module")
def minilm():
    from retrieval.dense.encoder import DenseEncoder
    return DenseEncoder("minilm", pooling="mean", device="cpu")


@pytest.fixture()
def tiny():
    # Two sequences, 3 tokens, 2 dims; the first has a padded last token with huge values that
    # must not leak into any pooler.
    first = torch.tensor([[[0., 0.], [1., 1.], [50., 50.]],
                          [[2., 0.], [0., 2.], [4., 4.]]])
    last = torch.tensor([[[1., 2.], [3., 4.], [100., 100.]],
                         [[0., 0.], [2., 2.], [4., 0.]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    att = torch.zeros(2, 2, 3, 3)  # (batch, heads, query, key) of layer 0
    att[0, 1] = torch.diag(torch.tensor([0.5, 0.25, 0.9]))
    att[1, 1] = torch.diag(torch.tensor([1.0, 0.5, 0.25]))
    out = SimpleNamespace(last_hidden_state=last, hidden_states=(first, torch.zeros_like(first), last),
                          attentions=(att, torch.zeros_like(att)))
    return out, mask


def test_poolers_match_hand_computation(tiny):
    out, mask = tiny
    expect = {
        "mean": [[2.0, 3.0], [2.0, 2.0 / 3.0]],
        "cls": [[1.0, 2.0], [0.0, 0.0]],
        # mean over unmasked tokens of (first + last) / 2
        "first-last": [[1.25, 1.75], [2.0, 4.0 / 3.0]],
        # sum_i w_i * (first_i + last_i) / 2 with w = attention diagonal of layer 0, head 1
        "ditto": [[0.75, 1.125], [1.0 + 0.5 + 1.0, 0.0 + 1.0 + 0.5]],
    }
    for name in POOLERS:
        pooler = get_pooler(name, 0, 1) if name == "ditto" else get_pooler(name)
        np.testing.assert_allclose(pooler(out, mask).numpy(), expect[name], rtol=1e-6, err_msg=name)
    # Ditto over the last layer only: sum_i w_i * last_i (same weights)
    last = get_pooler("ditto", 0, 1, states="last")(out, mask).numpy()
    w = torch.diagonal(out.attentions[0][:, 1], dim1=-2, dim2=-1) * mask
    np.testing.assert_allclose(last, (w.unsqueeze(-1) * out.hidden_states[-1]).sum(1).numpy(), rtol=1e-6)
    assert not np.allclose(last, expect["ditto"])
    with pytest.raises(UnknownPoolingError, match="unknown Ditto states"):
        get_pooler("ditto", 0, 1, states="middle")


def test_needs_flags_and_names():
    assert not get_pooler("mean").needs_hidden_states and not get_pooler("cls").needs_attentions
    assert get_pooler("first-last").needs_hidden_states and not get_pooler("first-last").needs_attentions
    assert get_pooler("ditto", 0, 0).needs_attentions
    assert canonical_name("first_last") == "first-last" and canonical_name("MEAN") == "mean"


def test_unknown_pooling_and_ditto_without_pair():
    with pytest.raises(UnknownPoolingError, match="unknown pooling 'max'"):
        get_pooler("max")
    assert issubclass(UnknownPoolingError, InputError)
    with pytest.raises(UnknownPoolingError, match="layer, head"):
        get_pooler("ditto")


def test_ditto_weights_equal_attention_diagonal_recomputed(minilm):
    """The weights Ditto uses are the softmax(QK^T/sqrt(d)) self-attention of each token,
    recomputed here from the layer's own query/key projections."""
    enc = minilm
    texts = ["the cat sat on the mat", "a much longer sentence about dense retrieval and pooling choices"]
    batch = enc._pad(enc.tokenize(texts))
    with torch.no_grad():
        enc.model.set_attn_implementation("eager")
        out = enc.model(**batch, output_hidden_states=True, output_attentions=True)
        mask = batch["attention_mask"]
        for layer, head in [(0, 3), (2, 7), (5, 11)]:
            sa = enc.model.encoder.layer[layer].attention.self
            hd = sa.attention_head_size
            h = out.hidden_states[layer]
            q = sa.query(h)[..., head * hd:(head + 1) * hd]
            k = sa.key(h)[..., head * hd:(head + 1) * hd]
            logits = q @ k.transpose(-1, -2) / math.sqrt(hd)
            logits = logits.masked_fill(mask[:, None, :] == 0, float("-inf"))
            probs = logits.softmax(-1)
            manual = torch.diagonal(probs, dim1=-2, dim2=-1)
            got = ditto_weights(out.attentions, layer, head)
            m = mask.bool()
            torch.testing.assert_close(got[m], manual[m], rtol=1e-4, atol=1e-6)
            # and the pooled vector is the weighted sum of (first + last) / 2
            pooled = get_pooler("ditto", layer, head)(out, mask)
            ref = (manual * mask)[..., None] * (out.hidden_states[0] + out.hidden_states[-1]) / 2
            torch.testing.assert_close(pooled, ref.sum(1), rtol=1e-4, atol=1e-5)
