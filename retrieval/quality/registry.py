"""The estimators by name: what ``--quality NAME[:ARG]`` and ``get_estimator`` resolve."""
from __future__ import annotations

from typing import Callable, Dict

from retrieval.quality.estimators import (DeepCTWeight, DenseNorm, Estimator, Length, PseudoPerplexity,
                                          QualityError, RandomQuality, StopwordShare)

#: Estimator used when ``--prune`` is given without ``--quality``. Chosen without training queries by
#: leave-one-collection-out over the estimators retr has (benchmarks/bench_defaults_pruning.py,
#: benchmarks/results/defaults.md): held out, each fold chose ``length``, which pruned 30% on average
#: +0.002 nDCG@10 better than random (bm25, dense, hybrid), where the shipped SciFact head
#: (``learned``) was 0.026 worse out of domain. No estimator tried beat random on every
#: collection (``length`` on NFCorpus: -0.013 to -0.016), hence OUT_OF_DOMAIN_NOTE.
DEFAULT_ESTIMATOR = "length"

#: What ``retr index --prune`` says when the estimator was not trained on the user's own corpus.
OUT_OF_DOMAIN_NOTE = (
    "{name!r} was not trained on this corpus: left out of development, no query-agnostic estimator pruned "
    "better than random on every collection (the default 'length': +0.002 nDCG@10 on average, down to -0.016 "
    "on NFCorpus; benchmarks/results/defaults.md). For an in-domain estimator, train a head on this corpus's "
    "training qrels (retr quality train) and pass --quality learned:HEAD.json, or a scores file.")


def out_of_domain_note(quality) -> "str | None":
    """The note for pruning with ``quality`` (None = the default), or None when the estimator is the
    user's own: a head file (``learned:HEAD.json``) or a scores file (a path that is not a name)."""
    name = quality or DEFAULT_ESTIMATOR
    if ":" in name and name.split(":", 1)[0] == "learned":
        return None
    if name.split(":", 1)[0] not in ESTIMATORS:
        return None   # a scores file
    return OUT_OF_DOMAIN_NOTE.format(name=name)


def _learned(**kw):
    from retrieval.quality.learned import LearnedQuality
    return LearnedQuality(**kw)


ESTIMATORS: Dict[str, Callable[..., Estimator]] = {
    "learned": _learned,
    "dense-norm": DenseNorm,
    "pseudo-ppl": PseudoPerplexity,
    "length": Length,
    "stopwords": StopwordShare,
    "random": RandomQuality,
    "deepct-mass": lambda **kw: DeepCTWeight(stat="mass", **kw),
    "deepct-max": lambda **kw: DeepCTWeight(stat="max", **kw),
}
#: For ``NAME:ARG`` specs (CLI ``--quality learned:head.json``): the keyword ARG fills.
_ARG = {"learned": "head", "dense-norm": "model", "pseudo-ppl": "model", "deepct-mass": "model",
        "deepct-max": "model", "random": "seed"}


def get_estimator(name: str, **kwargs) -> Estimator:
    """An estimator by registry name, optionally ``name:arg`` (a head file, model folder or
    seed); keyword arguments go to its constructor."""
    if ":" in name and name.split(":", 1)[0] in _ARG:
        name, arg = name.split(":", 1)
        kwargs[_ARG[name]] = int(arg) if name == "random" and arg.isdigit() else arg
    if name not in ESTIMATORS:
        raise QualityError(f"unknown quality estimator {name!r} (choose from: {', '.join(ESTIMATORS)})")
    return ESTIMATORS[name](**kwargs)
