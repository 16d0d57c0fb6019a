"""The parameter names of scikit-learn's ``TSNE``, openTSNE's ``TSNE`` and umap-learn's ``UMAP``
on probdr's estimators: every name of the three is a row of probdr's table, each row holds
against the estimators, docs/migrating.md is the table, and the libraries' digits examples run
with the import changed."""

import inspect
import pathlib

import numpy as np
import pytest
from sklearn.base import clone

import probdr
from probdr.estimators.compat import KEEP, LIBRARIES, migration_page

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
CASES = [(lib, name) for lib, (_, _, rows) in LIBRARIES.items() for name in rows]


def _signature(lib):
    path = LIBRARIES[lib][0]
    module, cls = path.rsplit(".", 1)
    klass = getattr(pytest.importorskip(module), cls)
    return {k: p.default for k, p in inspect.signature(klass.__init__).parameters.items()
            if k != "self"}


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_table_lists_every_parameter_of_the_library(lib):
    assert list(LIBRARIES[lib][2]) == list(_signature(lib))


@pytest.mark.parametrize("lib, name", CASES)
def test_each_row_holds_on_the_estimator(lib, name):
    row, cls = LIBRARIES[lib][2][name], getattr(probdr, LIBRARIES[lib][1])
    ours, default = cls().get_params(), _signature(lib)[name]
    if row.kind in ("same", "differs"):
        assert name in ours
    elif row.kind == "ignored":
        assert cls(**{name: default}).get_params() == ours
    elif row.kind == "refused":
        with pytest.raises(TypeError, match=f"{name}=.*no equivalent in probdr: "):
            cls(**{name: "some other value"})
        for ok in row.accept:  # probdr's own behaviour: accepted, nothing changed
            assert cls(**{name: ok}).get_params() == ours
    else:
        pairs = row.values.items() if isinstance(row.values, dict) else [(default, None)]
        for theirs, expected in pairs:
            est = cls(**{name: theirs})
            got = est.get_params()[row.to]
            if callable(row.values):
                expected = row.values(theirs)
            elif row.values is None:
                expected = theirs
            assert got == (ours[row.to] if expected is KEEP else expected)
            assert clone(est).get_params() == est.get_params()  # probdr's names
            assert cls().set_params(**{name: theirs}).get_params() == est.get_params()


def test_alias_given_with_probdr_name_is_refused():
    with pytest.raises(TypeError, match="max_iter is another name of n_iter"):
        probdr.TSNE(max_iter=500, n_iter=400)


def test_migration_page_is_the_table():
    assert DOCS.read_text() == migration_page(), \
        "regenerate: python -m probdr.estimators.compat > docs/migrating.md"


def _knn(Z, y):
    return probdr.metrics.knn_accuracy(np.asarray(Z), y, 5)


SKLEARN_EXAMPLE = """
{import_line}
from sklearn.datasets import load_digits

X, y = load_digits(n_class=6, return_X_y=True)
tsne = TSNE(n_components=2, max_iter=500, n_jobs=2, random_state=0, init="pca",
            learning_rate="auto", perplexity=30, method="barnes_hut")
X_embedded = tsne.fit_transform(X)
"""

UMAP_EXAMPLE = """
{import_line}
from sklearn.datasets import load_digits

digits = load_digits()
reducer = umap.UMAP(n_neighbors=15, min_dist=0.1, metric="euclidean", random_state=42,
                    negative_sample_rate=5, low_memory=True)
reducer.fit(digits.data)
embedding = reducer.transform(digits.data[:200])
"""


def test_scikit_learn_digits_example_with_the_import_changed():
    ns = {}
    exec(SKLEARN_EXAMPLE.format(import_line="from probdr import TSNE"), ns)
    assert ns["X_embedded"].shape == (1083, 2) and _knn(ns["X_embedded"], ns["y"]) > 0.95


def test_umap_learn_digits_example_with_the_import_changed():
    ns = {}
    exec(UMAP_EXAMPLE.format(import_line="import probdr as umap"), ns)
    y = ns["digits"].target
    assert _knn(ns["reducer"].embedding_, y) > 0.95
    assert ns["embedding"].shape == (200, 2) and _knn(ns["embedding"], y[:200]) > 0.9


def test_aliases_reach_an_estimator_inside_a_pipeline():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pipe = make_pipeline(StandardScaler(), probdr.TSNE()).set_params(tsne__max_iter=321)
    assert pipe.get_params()["tsne__n_iter"] == 321
    assert clone(pipe).get_params()["tsne__n_iter"] == 321
