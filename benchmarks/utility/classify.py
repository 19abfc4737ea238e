"""The downstream task: logistic regression on word n-gram TF-IDF features (scikit-learn).

A well-kept, deterministic classifier that is strong on IMDb (about 88-90% accuracy on the full
data) and cheap to train, so the benchmark measures what privatization does to the text, not
the training noise of a neural model. Hyper-parameters are fixed up front (never tuned on the
test reviews) and recorded in the results.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

SETTINGS = {
    "tfidf": {"lowercase": True, "ngram_range": (1, 2), "min_df": 2, "max_df": 0.95, "sublinear_tf": True,
              "token_pattern": r"(?u)\b\w[\w']*\b"},
    "logistic_regression": {"C": 4.0, "solver": "liblinear", "max_iter": 1000},
}


def make_classifier() -> Pipeline:
    return Pipeline([("tfidf", TfidfVectorizer(**SETTINGS["tfidf"])),
                     ("lr", LogisticRegression(**SETTINGS["logistic_regression"]))])


def fit(texts: Sequence[str], labels: Sequence[int]) -> Pipeline:
    model = make_classifier()
    model.fit(list(texts), np.asarray(labels))
    return model


def correct(model: Pipeline, texts: Sequence[str], labels: Sequence[int]) -> np.ndarray:
    """Per-review correctness (bool array): kept so differences to the baseline can be paired."""
    return model.predict(list(texts)) == np.asarray(labels)


def describe() -> dict:
    return {"library": "scikit-learn", "features": "word 1-2-gram TF-IDF", **{
        key: {k: (list(v) if isinstance(v, tuple) else v) for k, v in value.items()} for key, value in SETTINGS.items()}}
