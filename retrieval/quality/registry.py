"""The estimators by name: what ``--quality NAME[:ARG]`` and ``get_estimator`` resolve."""
from __future__ import annotations

from typing import Callable, Dict

from retrieval.quality.estimators import (DeepCTWeight, DenseNorm, Estimator, Length, PseudoPerplexity,
                                          QualityError, RandomQuality, StopwordShare)

#: Estimator used when ``--prune`` is given without ``--quality``: the one that kept
#: effectiveness best in eval/results/quality.md among those that need no training data
#: from the user (eval/results/quality.md).
DEFAULT_ESTIMATOR = "learned"


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
