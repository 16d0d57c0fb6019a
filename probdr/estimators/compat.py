"""The parameter names of the libraries people come from, on probdr's :class:`~probdr.TSNE` and
:class:`~probdr.UMAP`: scikit-learn's ``sklearn.manifold.TSNE``, openTSNE's ``TSNE`` and
umap-learn's ``UMAP``.

Each of their parameters is one row of a table (:data:`TABLES`), of one kind:

* ``same``: probdr has the name, with the same meaning (a note says what probdr adds);
* ``differs``: probdr has the name with another meaning (the note says how to convert);
* ``alias``: the name is accepted and converted to probdr's parameter (``max_iter=500`` sets
  ``n_iter=500``; ``method="exact"`` sets ``repulsion="exact"``); ``get_params`` and ``clone``
  see probdr's name, and ``set_params`` takes the alias too;
* ``ignored``: a setting of the other library's implementation that does not change what is
  computed (``low_memory``): accepted, no effect;
* ``refused``: probdr has no equivalent; a ``TypeError`` names what to use instead or says why
  there is none. Values that are probdr's own behaviour (``densmap=False``) are accepted.

:func:`foreign_names` applies a library's rows to an estimator class (its ``__init__`` and
``set_params``); :func:`migration_page` writes the tables of ``docs/migrating.md`` from them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from numbers import Number
from typing import Any

__all__ = ["Foreign", "TABLES", "LIBRARIES", "foreign_names", "translate", "migration_page"]

#: an alias value that leaves probdr's parameter as it is
KEEP = object()
_BH = "probdr has no Barnes-Hut tree"
_STALL = ("probdr runs every one of the n_iter steps (no early stop); to stop early, pass "
          "callbacks=f, f(step, Z, loss) returning True")


@dataclass(frozen=True)
class Foreign:
    """One parameter of another library: its ``kind`` (see the module), probdr's parameter
    (``to``), a ``note`` on the meaning, ``values`` (an alias's value map, ``{theirs: ours}``, or
    a function of the value) and ``accept`` (a refused name's values that are probdr's
    behaviour)."""

    name: str
    kind: str
    to: str | None = None
    note: str = ""
    values: Any = None
    accept: tuple = ()


def _rows(*rows) -> dict[str, Foreign]:
    return {r.name: r for r in rows}


def _same(name, note=""):
    return Foreign(name, "same", name, note)


def _knn_pair(value):
    """umap-learn's ``(indices, distances, search index)``: probdr's ``(indices, distances)``."""
    if not isinstance(value, tuple) or len(value) != 3:  # probdr's own: checked by fit
        return value
    return None if all(v is None for v in value) else value[:2]


SKLEARN = _rows(
    _same("n_components"), _same("perplexity"), _same("early_exaggeration"),
    _same("learning_rate", "'auto' is the same rule, max(n / early_exaggeration / 4, 50); a "
          "number is the same step (t-SNE's gradient, its factor 4 kept)"),
    Foreign("max_iter", "alias", "n_iter", "steps in all, early exaggeration included, as here"),
    Foreign("n_iter_without_progress", "refused", note=_STALL),
    Foreign("min_grad_norm", "refused", note=_STALL),
    _same("metric", "the distances of probdr.input.distances, a callable or 'precomputed'"),
    _same("metric_params"),
    _same("init", "'pca' (scaled to standard deviation 1e-4, as there), 'random' or an array; "
          "also 'spectral' and 'ccpca'"),
    _same("verbose"), _same("random_state"),
    Foreign("method", "alias", "repulsion", f"{_BH}: 'barnes_hut' gives 'auto' (FFT "
            "interpolation of the same normaliser above 1,000 points in 2-D, exact below)",
            {"barnes_hut": "auto", "exact": "exact"}),
    Foreign("angle", "refused", note=f"{_BH} (angle sets its accuracy); repulsion='exact' is "
            "exact, repulsion='fft' interpolates on a fixed grid"),
    _same("n_jobs"))

OPENTSNE = _rows(
    _same("n_components"), _same("perplexity"),
    Foreign("learning_rate", "differs", "learning_rate", "this gradient keeps t-SNE's factor 4: a "
            "number here is openTSNE's divided by 4; 'auto' is openTSNE's max(200, n / "
            "exaggeration) so divided"),
    _same("early_exaggeration_iter", "probdr's default 'auto' is 250 from n_iter = 750 on, a "
          "third of a shorter fit"),
    Foreign("early_exaggeration", "differs", "early_exaggeration", "a number (openTSNE's 'auto' "
            "is 12, probdr's default)"),
    Foreign("n_iter", "differs", "n_iter", "openTSNE counts the steps after early exaggeration "
            "(500); probdr's n_iter counts them all (750 = 250 + 500)"),
    Foreign("exaggeration", "refused", note="probdr's main phase runs without exaggeration",
            accept=(None, 1, 1.0)),
    _same("dof", "also 'learn': fitted with the embedding"),
    Foreign("theta", "refused", note=f"{_BH} (theta sets its accuracy); repulsion='exact' is "
            "exact"),
    *(Foreign(k, "refused", note="probdr's FFT interpolation grid is fixed") for k in
      ("n_interpolation_points", "min_num_intervals", "ints_in_interval")),
    Foreign("initialization", "alias", "init", "'pca', 'random', 'spectral' or an array"),
    _same("metric", "the distances of probdr.input.distances, a callable or 'precomputed'"),
    _same("metric_params"),
    Foreign("initial_momentum", "alias", "early_momentum", "momentum during early exaggeration"),
    Foreign("final_momentum", "alias", "momentum", "momentum after early exaggeration"),
    Foreign("max_grad_norm", "refused", note="probdr's TSNE does not clip gradients; "
            "GraphCoupling(grad_clip=...) clips each coordinate (not the norm)", accept=(None,)),
    Foreign("max_step_norm", "refused", note="probdr's gains optimiser does not cap a step"),
    _same("n_jobs"),
    Foreign("neighbors", "alias", "neighbors", "'approx', 'annoy' and 'hnsw' give probdr's "
            "'approximate' search", {"auto": "auto", "exact": "exact", "approx": "approximate",
                                     "annoy": "approximate", "hnsw": "approximate",
                                     "pynndescent": "pynndescent", "approximate": "approximate"}),
    Foreign("knn_kwargs", "refused", note="probdr's neighbour search takes no options; pass "
            "neighbour lists computed elsewhere as precomputed_knn=(indices, distances)",
            accept=(None,)),
    Foreign("negative_gradient_method", "alias", "repulsion", f"{_BH}: 'bh' gives 'auto' (FFT "
            "above 1,000 points in 2-D, exact below)",
            {"auto": "auto", "fft": "fft", "interpolation": "fft", "bh": "auto",
             "barnes-hut": "auto", "barnes_hut": "auto"}),
    Foreign("callbacks", "differs", "callbacks", "probdr calls f(step, Z, loss); openTSNE "
            "calls f(iteration, error, embedding)"),
    Foreign("callbacks_every_iters", "alias", "callbacks_every"),
    _same("random_state"), _same("verbose"))

UMAP_LEARN = _rows(
    _same("n_neighbors"), _same("n_components"),
    _same("metric", "the distances of probdr.input.distances, a callable or 'precomputed'"),
    Foreign("metric_kwds", "alias", "metric_params"),
    Foreign("output_metric", "refused", note="the embedding's distance is Euclidean",
            accept=("euclidean",)),
    Foreign("output_metric_kwds", "refused", note="the embedding's distance is Euclidean",
            accept=(None,)),
    Foreign("n_epochs", "differs", "n_epochs", "None: 100 epochs of 3 steps up to 10,000 "
            "points, 60 of 12 steps up to 100,000 and 100 of 8 above (umap-learn: 500 up to "
            "10,000 points, else 200)"),
    _same("learning_rate"), _same("init", "'spectral', 'pca', 'random' or an array"),
    _same("min_dist"), _same("spread"),
    Foreign("low_memory", "ignored", note="a memory setting of umap-learn's neighbour search"),
    _same("n_jobs"),
    Foreign("set_op_mix_ratio", "refused", note="probdr's input graph is the fuzzy union "
            "(set_op_mix_ratio=1)", accept=(1, 1.0)),
    Foreign("local_connectivity", "refused", note="probdr's calibration sets one neighbour at "
            "distance rho (local_connectivity=1)", accept=(1, 1.0)),
    Foreign("repulsion_strength", "alias", "negative_weight", "the weight of the negatives"),
    Foreign("negative_sample_rate", "alias", "negative_samples", "negatives per edge"),
    Foreign("transform_queue_size", "ignored", note="a setting of umap-learn's search for new "
            "points' neighbours"),
    *(Foreign(k, "refused", note="UMAP fits the curve's a and b to min_dist and spread; for "
              "given a and b use GraphCoupling(prior_x='B~', prior_z='B', affinity='umap', "
              "kernel_z='umap_odds', kernel_params={'a': a, 'b': b})", accept=(None,))
      for k in ("a", "b")),
    _same("random_state"),
    Foreign("angular_rp_forest", "ignored", note="a setting of umap-learn's neighbour search"),
    Foreign("target_n_neighbors", "refused", note="labels join points of one label "
            "(probdr.input.labels), with no neighbour count", accept=(-1,)),
    Foreign("target_metric", "refused", note="labels are categories", accept=("categorical",)),
    Foreign("target_metric_kwds", "refused", note="labels are categories", accept=(None,)),
    _same("target_weight"),
    Foreign("transform_seed", "ignored", note="transform is deterministic (a fixed seed)"),
    Foreign("transform_mode", "refused", note="transform places new points in the embedding",
            accept=("embedding",)),
    Foreign("force_approximation_algorithm", "alias", "neighbors", "True gives "
            "neighbors='approximate'", {True: "approximate", False: KEEP}),
    _same("verbose"),
    Foreign("tqdm_kwds", "ignored", note="the progress bar's settings"),
    Foreign("unique", "refused", note="duplicated points are kept (they share their "
            "neighbours)", accept=(False,)),
    Foreign("densmap", "refused", note="densMAP is not implemented", accept=(False,)),
    *(Foreign(k, "refused", note="densMAP is not implemented", accept=(v,)) for k, v in
      (("dens_lambda", 2.0), ("dens_frac", 0.3), ("dens_var_shift", 0.1))),
    Foreign("output_dens", "refused", note="densMAP is not implemented", accept=(False,)),
    Foreign("disconnection_distance", "refused", note="no distance cuts an edge here; "
            "metric='precomputed' takes distances already cut", accept=(None,)),
    Foreign("precomputed_knn", "alias", "precomputed_knn", "(indices, distances); umap-learn's "
            "search index, the third item, is not used", _knn_pair))

#: library -> (its class, probdr's estimator, its rows)
LIBRARIES = {"scikit-learn": ("sklearn.manifold.TSNE", "TSNE", SKLEARN),
             "openTSNE": ("openTSNE.TSNE", "TSNE", OPENTSNE),
             "umap-learn": ("umap.UMAP", "UMAP", UMAP_LEARN)}
TABLES = {lib: rows for lib, (_, _, rows) in LIBRARIES.items()}


def _one_of(value, options) -> bool:
    """``value`` equals one of ``options`` (booleans only booleans; an array never does)."""
    if not isinstance(value, (str, Number, type(None))):
        return False
    return any(value == o and isinstance(value, bool) == isinstance(o, bool) for o in options)


def _convert(row: Foreign, value, where: str) -> dict:
    """The probdr parameters that ``row``'s ``value`` sets; ``TypeError`` when refused."""
    if row.kind == "ignored":
        return {}
    if row.kind == "refused":
        if _one_of(value, row.accept):
            return {}
        raise TypeError(f"{where}: {row.name}={value!r} has no equivalent in probdr: {row.note}.")
    if callable(row.values):
        return {row.to: row.values(value)}
    if row.values is None:
        return {row.to: value}
    if not _one_of(value, row.values):
        if row.to == row.name:  # probdr's own parameter: its values are checked by fit
            return {row.to: value}
        raise TypeError(f"{where}: {row.name}={value!r}: probdr takes {row.name} = "
                        f"{', '.join(map(repr, row.values))} ({row.note}).")
    ours = next(v for k, v in row.values.items() if _one_of(value, (k,)))
    return {} if ours is KEEP else {row.to: ours}


def translate(rows: dict[str, Foreign], params: dict, where: str) -> dict:
    """``params`` with every foreign name of ``rows`` converted to probdr's (the others as
    given); a probdr name given with its alias is refused (``TypeError``)."""
    out = {k: v for k, v in params.items() if k not in rows or rows[k].kind in ("same",
                                                                                   "differs")}
    for name, value in params.items():
        row = rows.get(name)
        if row is None or row.kind in ("same", "differs"):
            continue
        for key, ours in _convert(row, value, where).items():
            if key in out and key != name:
                raise TypeError(f"{where}: {name} is another name of {key}; give one of them.")
            out[key] = ours
    return out


def foreign_names(*libraries: str):
    """A class decorator: ``cls.__init__`` and ``cls.set_params`` take the foreign names of
    ``libraries`` (:data:`TABLES`) and convert them (:func:`translate`); the signature, and so
    ``get_params`` and ``clone``, keep probdr's names."""
    rows: dict[str, Foreign] = {}
    for lib in libraries:
        rows.update(TABLES[lib])

    def decorate(cls):
        init, set_params = cls.__init__, cls.set_params

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **translate(rows, kwargs, cls.__name__))

        @functools.wraps(set_params)
        def set_params_(self, **params):
            return set_params(self, **translate(rows, params, cls.__name__))

        cls.__init__, cls.set_params, cls._foreign_rows = __init__, set_params_, rows
        return cls
    return decorate


def _row_text(row: Foreign) -> tuple[str, str]:
    """The table's probdr column and meaning column for ``row``."""
    if row.kind == "refused":
        accepted = ", ".join(f"`{v!r}`" for v in row.accept)
        return "refused" + (f" (accepted: {accepted})" if accepted else ""), row.note
    if row.kind == "ignored":
        return "accepted, no effect", row.note
    to = f"`{row.to}`"
    if isinstance(row.values, dict):
        pairs = [f"`{k!r}` → {'unchanged' if v is KEEP else f'`{v!r}`'}"
                 for k, v in row.values.items() if k != v]
        to += f" ({', '.join(pairs)})" if pairs else ""
    note = row.note or ("same meaning" if row.kind != "alias" else "converted")
    return to, ("differs: " if row.kind == "differs" else "") + note


def migration_page() -> str:
    """The text of ``docs/migrating.md``: one table per library, every parameter of its class
    in the order of :data:`TABLES` (``python -m probdr.estimators.compat`` prints it)."""
    parts = [_INTRO]
    for lib, (theirs, ours, rows) in LIBRARIES.items():
        parts.append(f"\n## From {lib}'s `{theirs}` to `probdr.{ours}`\n\n"
                     f"| {lib} | probdr | meaning in probdr |\n|---|---|---|")
        for row in rows.values():
            to, note = _row_text(row)
            parts.append(f"| `{row.name}` | {to} | {note} |")
    return "\n".join(parts) + "\n"


_INTRO = """# Migrating from scikit-learn, openTSNE and umap-learn

probdr's `TSNE` and `UMAP` take the parameter names of scikit-learn's `sklearn.manifold.TSNE`,
openTSNE's `TSNE` and umap-learn's `UMAP`: code written for them runs with the import changed.

```python
from probdr import TSNE        # was: from sklearn.manifold import TSNE
Z = TSNE(n_components=2, max_iter=500, method="barnes_hut", random_state=0).fit_transform(X)
```

A name probdr spells otherwise is converted (`max_iter=500` sets `n_iter=500`;
`get_params`, `clone` and saved models use probdr's name, and `set_params` takes both). A name
with no equivalent is refused with a `TypeError` that says why, or what to use instead; the
values that are probdr's own behaviour (`densmap=False`) are accepted. The tables list every
parameter of the three classes; a test checks them against the libraries' signatures and against
probdr's estimators.
"""


if __name__ == "__main__":  # pragma: no cover
    print(migration_page(), end="")
