"""MLM masking for dense pre-training (retrieval/dense/masking.py), on the bundled MiniLM's tokenizer
(the tokenizer only, no model): whole words, the shared budget, ROM following term importance,
BERT's 80/10/10 rule, labels, determinism under a seed, idf weights and errors on bad input."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from indexes.errors import InputError
from retrieval.dense import masking as m
from retrieval.models import resolve_model_path

PASSAGE = ("Photosynthesis in cyanobacteria converts sunlight into chemical energy, and the oxygen that "
           "these bacteria release is the reason that the atmosphere of the early earth changed.")

CORPUS = [
    "the cell is the unit of life and the cell divides",
    "energy in the cell comes from the mitochondria",
    "the earth and the atmosphere of the earth",
    "sunlight is energy that reaches the earth",
    "the reason for the change is the oxygen in the atmosphere",
    "bacteria in the soil and bacteria in the water",
    "chemical energy is stored in the cell",
    "the early universe and the early earth",
    "photosynthesis in plants uses sunlight",
    "cyanobacteria release oxygen",
]


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path("minilm"))


@pytest.fixture(scope="module")
def ws(tok):
    return m.words(tok, PASSAGE)


def _doc_freqs(docs):
    df = Counter()
    for d in docs:
        df.update(set(d.split()))
    return dict(df)


def _synthetic(n_words_by_length, start_id=2000):
    """Words with chosen piece counts, ids all ordinary vocabulary ids ([CLS]/[SEP] around them)."""
    ids, spans, pos = [101], [], 1
    for n in n_words_by_length:
        spans.append((pos, pos + n))
        ids.extend(range(start_id + pos, start_id + pos + n))
        pos += n
    ids.append(102)
    texts = tuple(f"w{i}" for i in range(len(spans)))
    return m.Words(" ".join(texts), np.array(ids, dtype=np.int64), tuple(spans), texts)


def _masked_positions(res):
    return set(np.flatnonzero(res.labels != m.IGNORE_INDEX).tolist())


# -- words -----------------------------------------------------------------------------------------

def test_words_group_the_pieces_of_each_word_and_leave_out_special_tokens(tok, ws):
    enc = tok(PASSAGE)
    assert ws.input_ids.tolist() == enc["input_ids"]
    wid = enc.word_ids()
    inside = [p for s, e in ws.spans for p in range(s, e)]
    assert inside == [p for p, w in enumerate(wid) if w is not None]          # every word token, once, in order
    assert 0 not in inside and len(ws.input_ids) - 1 not in inside           # [CLS], [SEP]
    for (s, e), text in zip(ws.spans, ws.texts):
        assert len({wid[p] for p in range(s, e)}) == 1
    assert ws.texts[0] == "Photosynthesis" and ws.spans[0][1] - ws.spans[0][0] > 1   # a multi-piece word
    assert "cyanobacteria" in ws.texts
    assert ws.n_tokens == len(inside)


def test_truncation_keeps_whole_words_of_what_is_left(tok):
    ws = m.words(tok, PASSAGE, max_length=8)
    assert len(ws.input_ids) == 8 and ws.n_tokens == 6


# -- the budget ------------------------------------------------------------------------------------

def test_the_budget_rounds_half_up_and_is_at_least_one():
    assert m.mask_budget(10, 0.15) == 2      # 1.5
    assert m.mask_budget(30, 0.15) == 5      # 4.5 (Python's round would give 4)
    assert m.mask_budget(50, 0.15) == 8      # 7.5
    assert m.mask_budget(3, 0.15) == 1       # 0.45, but at least one
    assert m.mask_budget(100, 0.3) == 30


def test_rom_and_random_mask_the_same_number_of_tokens_per_passage(tok):
    texts = [PASSAGE, "Cyanobacteria photosynthesize.", "A b c.",
             "Immunohistochemistry, electrophysiology and pharmacokinetics of antihypertensives.",
             " ".join(CORPUS)]
    weights = m.idf_importance(_doc_freqs(CORPUS), len(CORPUS))
    for text in texts:
        ws = m.words(tok, text)
        for rate in (0.15, 0.3, 0.5, 0.9):
            counts = {m.random_mask(tok, ws, rate=rate, rng=s).n_masked for s in range(20)}
            counts |= {m.rom_mask(tok, ws, weights, rate=rate, rng=s).n_masked for s in range(20)}
            assert len(counts) == 1, (text, rate, counts)
            budget = m.mask_budget(ws.n_tokens, rate)
            single = int((ws.lengths == 1).sum())
            if single >= budget:
                assert counts == {budget}
            else:
                assert 0 < counts.pop() <= max(budget, int(ws.lengths.min()))


def test_whole_words_reach_the_target_where_skipping_alone_would_stop_short(tok):
    ws = _synthetic([2, 2, 3])                 # 7 tokens; rate 0.43 -> budget 3: only the 3-piece word fits
    for seed in range(30):
        for res in (m.random_mask(tok, ws, rate=0.43, rng=seed),
                    m.rom_mask(tok, ws, [5.0, 5.0, 0.1], rate=0.43, rng=seed)):
            assert res.masked_words == (2,) and res.n_masked == 3


def test_a_passage_of_one_long_word_masks_that_word(tok):
    ws = _synthetic([4])
    res = m.random_mask(tok, ws, rng=0)
    assert res.masked_words == (0,) and res.n_masked == 4


# -- whole words and labels ------------------------------------------------------------------------

def test_each_word_is_masked_whole_or_not_at_all(tok, ws):
    multi = [i for i, n in enumerate(ws.lengths) if n > 1]
    assert len(multi) >= 2
    weights = np.ones(len(ws))
    weights[multi] = 20.0                         # so multi-piece words are masked often
    seen = set()
    for seed in range(300):
        for res in (m.random_mask(tok, ws, rate=0.3, rng=seed), m.rom_mask(tok, ws, weights, rate=0.3, rng=seed)):
            got = _masked_positions(res)
            for i, (s, e) in enumerate(ws.spans):
                inside = got & set(range(s, e))
                assert not inside or inside == set(range(s, e)), (i, sorted(inside))
            seen |= set(res.masked_words) & set(multi)
    assert seen == set(multi)


def test_labels_are_the_original_ids_exactly_where_masked_and_ignored_elsewhere(tok, ws):
    weights = m.idf_importance(_doc_freqs(CORPUS), len(CORPUS))
    for seed in range(50):
        for res in (m.random_mask(tok, ws, rng=seed), m.rom_mask(tok, ws, weights, rng=seed)):
            want = {p for i in res.masked_words for p in range(*ws.spans[i])}
            assert _masked_positions(res) == want
            idx = sorted(want)
            assert res.labels[idx].tolist() == ws.input_ids[idx].tolist()
            rest = np.ones(len(ws.input_ids), dtype=bool)
            rest[idx] = False
            assert (res.labels[rest] == m.IGNORE_INDEX).all()
            assert res.input_ids[rest].tolist() == ws.input_ids[rest].tolist()   # only masked positions change
            assert res.input_ids.dtype == np.int64 and res.labels.dtype == np.int64


def test_the_80_10_10_rule_holds_over_many_draws(tok, ws):
    special = set(tok.all_special_ids)
    n = masked = kept = other = 0
    for seed in range(1500):
        res = m.random_mask(tok, ws, rate=0.3, rng=seed)
        idx = sorted(_masked_positions(res))
        new, old = res.input_ids[idx], ws.input_ids[idx]
        n += len(idx)
        masked += int((new == tok.mask_token_id).sum())
        kept += int((new == old).sum())
        swapped = new[(new != tok.mask_token_id) & (new != old)]
        other += len(swapped)
        assert not special & set(swapped.tolist())          # random replacements are never special tokens
    assert n > 10000
    assert abs(masked / n - 0.8) < 0.02
    assert abs(kept / n - 0.1) < 0.015
    assert abs(other / n - 0.1) < 0.015


# -- ROM follows the importance --------------------------------------------------------------------

def test_rom_masks_heavy_words_more_often_than_light_ones_and_zero_weight_words_never(tok):
    ws = _synthetic([1] * 20)                    # 20 words, budget 3
    weights = np.array([4.0] * 5 + [1.0] * 5 + [0.0] * 10)
    hits = np.zeros(20)
    draws = 3000
    for seed in range(draws):
        res = m.rom_mask(tok, ws, weights, rng=seed)
        assert res.n_masked == 3
        hits[list(res.masked_words)] += 1
    freq = hits / draws
    assert freq[:5].mean() > 2 * freq[5:10].mean()
    assert freq[5:10].mean() > 0.05
    assert freq[10:].max() == 0
    # random masking, the same budget: every word alike
    hits = np.zeros(20)
    for seed in range(draws):
        hits[list(m.random_mask(tok, ws, rng=seed).masked_words)] += 1
    assert abs(hits[:5].mean() - hits[10:].mean()) / draws < 0.03


def test_rom_with_idf_weights_prefers_rare_words_and_almost_never_masks_stop_words(tok, ws):
    n_docs = 1000
    df = {k: 900 for k in m.LUCENE_STOPWORDS | {"these"}}
    df.update({",": 1000, ".": 1000})
    df.update(dict.fromkeys(["photosynthesis", "cyanobacteria", "sunlight", "bacteria", "atmosphere"], 2))
    df.update(dict.fromkeys(["chemical", "oxygen", "release", "converts"], 40))
    df.update(dict.fromkeys(["energy", "reason", "early", "earth", "changed"], 500))
    weights = m.idf_importance(df, n_docs)
    w = m.word_weights(ws, weights)
    keys = [t.lower() for t in ws.texts]
    assert all(k in df for k in keys)
    stop = np.array([k in m.LUCENE_STOPWORDS for k in keys])
    assert stop.sum() >= 8 and (w[stop] == 0).all()
    rom, rnd = np.zeros(len(ws)), np.zeros(len(ws))
    draws = 2000
    for seed in range(draws):
        rom[list(m.rom_mask(tok, ws, weights, rng=seed).masked_words)] += 1
        rnd[list(m.random_mask(tok, ws, rng=seed).masked_words)] += 1
    rom, rnd = rom / draws, rnd / draws
    assert rom[w == 0].max() <= 0.01                     # stop words and punctuation: (almost) never
    assert rnd[stop].mean() > 0.05                       # where random masking takes them as often as any
    single = ws.lengths == 1                             # longer words also compete for the budget's room
    rare = single & (w > 4)
    mid = single & (w > 2) & (w < 4)
    common = single & (w > 0) & (w < 1)
    assert rare.sum() >= 3 and mid.sum() >= 3 and common.sum() >= 4
    assert rom[rare].min() > rom[mid].max()
    assert rom[mid].min() > rom[common].max()
    assert rom[rare].mean() > 3 * rom[common].mean()
    assert rom[rare].mean() > 2 * rnd[rare].mean()       # and far more often than random masking does


def test_a_callable_provider_and_a_per_word_array_give_the_same_masks_as_the_mapping(tok, ws):
    weights = m.idf_importance(_doc_freqs(CORPUS), len(CORPUS))
    per_word = m.word_weights(ws, weights)
    for seed in range(10):
        a = m.rom_mask(tok, ws, weights, rng=seed)
        b = m.rom_mask(tok, ws, lambda text: weights, rng=seed)
        c = m.rom_mask(tok, ws, per_word, rng=seed)
        d = m.rom_mask(tok, PASSAGE, weights, rng=seed)
        for other in (b, c, d):
            assert a.input_ids.tolist() == other.input_ids.tolist() and a.masked_words == other.masked_words


def test_temperature_and_uniform_mix_reshape_the_probabilities():
    w = np.array([4.0, 1.0, 0.0, 0.0])
    assert m.masking_probabilities(w).tolist() == [0.8, 0.2, 0.0, 0.0]
    flat = m.masking_probabilities(w, temperature=4.0)
    assert flat[0] / flat[1] == pytest.approx(math.sqrt(2))
    assert m.masking_probabilities(w, uniform_mix=1.0).tolist() == [0.25] * 4
    mixed = m.masking_probabilities(w, uniform_mix=0.2)
    assert mixed.sum() == pytest.approx(1.0) and mixed[2] == pytest.approx(0.05)
    assert m.masking_probabilities(np.zeros(3)).tolist() == [0.0] * 3


def test_uniform_mix_lets_zero_weight_words_be_drawn(tok):
    ws = _synthetic([1] * 20)
    weights = np.array([1.0] * 10 + [0.0] * 10)
    drawn = set()
    for seed in range(200):
        drawn |= set(m.rom_mask(tok, ws, weights, rng=seed, uniform_mix=0.5).masked_words)
    assert drawn & set(range(10, 20))


def test_a_passage_of_stop_words_only_is_still_masked(tok):
    res = m.rom_mask(tok, "it is the one that is not.", m.idf_importance({"one": 1}, 5), rng=0)
    assert res.n_masked >= 1


# -- determinism -----------------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_masks_and_other_seeds_others(tok, ws):
    weights = m.idf_importance(_doc_freqs(CORPUS), len(CORPUS))
    for fn in (lambda rng: m.random_mask(tok, ws, rate=0.3, rng=rng),
               lambda rng: m.rom_mask(tok, ws, weights, rate=0.3, rng=rng)):
        a, b = fn(7), fn(np.random.default_rng(7))
        assert a.input_ids.tolist() == b.input_ids.tolist() and a.labels.tolist() == b.labels.tolist()
        outs = {(tuple(fn(s).input_ids.tolist()), fn(s).masked_words) for s in range(8)}
        assert len(outs) >= 6


def test_a_shared_generator_moves_on_between_passages(tok, ws):
    gen = np.random.default_rng(3)
    first, second = m.random_mask(tok, ws, rng=gen), m.random_mask(tok, ws, rng=gen)
    gen = np.random.default_rng(3)
    assert m.random_mask(tok, ws, rng=gen).input_ids.tolist() == first.input_ids.tolist()
    assert m.random_mask(tok, ws, rng=gen).input_ids.tolist() == second.input_ids.tolist()


# -- idf -------------------------------------------------------------------------------------------

def test_idf_importance_is_lucene_bm25_idf_with_stop_words_and_punctuation_at_zero():
    got = m.idf_importance({"rare": 1, "common": 90, "the": 100, "of": 3, ",": 50, "zero": 0}, 100)
    assert got["rare"] == pytest.approx(math.log(1 + (100 - 1 + 0.5) / (1 + 0.5)))
    assert got["common"] == pytest.approx(math.log(1 + (100 - 90 + 0.5) / (90 + 0.5)))
    assert got["zero"] > got["rare"] > got["common"] > 0
    assert got["the"] == got["of"] == got[","] == 0.0
    assert m.idf_importance({"the": 1}, 10, stopwords=())["the"] > 0


# -- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", [0, 1, 0.0, 1.0, -0.1, 1.5, float("nan"), True])
def test_a_rate_outside_zero_one_is_refused(tok, ws, rate):
    with pytest.raises(InputError, match="rate"):
        m.random_mask(tok, ws, rate=rate, rng=0)
    with pytest.raises(InputError, match="rate"):
        m.rom_mask(tok, ws, np.ones(len(ws)), rate=rate, rng=0)
    with pytest.raises(InputError, match="rate"):
        m.mask_budget(10, rate)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_an_empty_passage_is_refused(tok, text):
    with pytest.raises(InputError, match="empty passage"):
        m.words(tok, text)
    with pytest.raises(InputError, match="empty passage"):
        m.random_mask(tok, text, rng=0)
    with pytest.raises(InputError, match="empty passage"):
        m.rom_mask(tok, text, {}, rng=0)


def test_negative_or_malformed_weights_are_refused(tok, ws):
    with pytest.raises(InputError, match="negative"):
        m.rom_mask(tok, ws, {"cyanobacteria": -1.0}, rng=0)
    with pytest.raises(InputError, match="negative"):
        m.rom_mask(tok, ws, -np.ones(len(ws)), rng=0)
    with pytest.raises(InputError, match="finite"):
        m.rom_mask(tok, ws, np.full(len(ws), np.nan), rng=0)
    with pytest.raises(InputError, match="weights for a passage of"):
        m.rom_mask(tok, ws, np.ones(len(ws) + 1), rng=0)
    with pytest.raises(InputError, match="temperature"):
        m.rom_mask(tok, ws, np.ones(len(ws)), temperature=0, rng=0)
    with pytest.raises(InputError, match="uniform_mix"):
        m.rom_mask(tok, ws, np.ones(len(ws)), uniform_mix=1.5, rng=0)
    with pytest.raises(InputError, match="rng"):
        m.random_mask(tok, ws, rng="seven")


def test_bad_document_frequencies_are_refused():
    with pytest.raises(InputError, match="n_docs"):
        m.idf_importance({"a": 1}, 0)
    with pytest.raises(InputError, match="document frequency"):
        m.idf_importance({"cell": 11}, 10)
    with pytest.raises(InputError, match="document frequency"):
        m.idf_importance({"cell": -1}, 10)


def test_a_slow_tokenizer_is_refused(tok):
    class Slow:
        is_fast = False

    with pytest.raises(InputError, match="fast tokenizer"):
        m.words(Slow(), PASSAGE)
