"""Does a point's posterior spread predict what users see? Instability across seeds, and errors.

For each data set: the posterior of probdr's fit (``--inference laplace`` or ``svi``, seed 0)
gives each point a spread (``posterior_sd_``) and a reliability (``reliability_``). Against it:

* neighbourhood change across seeds: the mean Jaccard distance between a point's 15 nearest
  neighbours in each seed's map and in the first (what changes for a user, whatever the
  placement of whole clusters);
* movement across seeds: ``--seeds`` fits of probdr's MAP and of the peer (openTSNE for t-SNE,
  umap-learn for UMAP), each Procrustes-aligned to the first; a point's movement is the RMS
  distance of its aligned positions to their mean, divided by the embedding's RMS radius;
* 5-NN errors: whether the leave-one-out 5-NN label prediction in the MAP embedding is wrong.

For UMAP, GhostUMAP2's per-point instability (16 ghosts per point, where ``pip install
ghostumap`` provides it) is scored against the same targets.

Reported: Spearman rho between the spread (``posterior_sd_``) or the neighbourhood change the
posterior itself predicts (``1 - reliability_``; ``_third``: at a third of the posterior's
spread, ``point_reliability(spread=1/3)``) and the movement or neighbourhood change, and the
AUROC of the spread for flagging 5-NN errors.

    python benchmarks/reliability.py --data digits --method tsne --inference laplace
    python benchmarks/reliability.py --data digits --method tsne --inference svi --own-init random
    python benchmarks/reliability.py --data pbmc68k --method tsne --inference hmc --own-init random

``--inference-params '{"guide": "lowrank"}'`` passes options to the posterior fit.
``--own-init random`` fits probdr's own seeds from random starts (t-SNE's seeds otherwise give
one map on most of these data: PCA initialisation and deterministic steps); the posterior is
still the default fit's.

Results append to ``benchmarks/results/reliability.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import KNeighborsClassifier

import probdr
from probdr.infer.draws import procrustes_align

RESULTS = Path(__file__).parent / "results" / "reliability.jsonl"


def load(name: str):
    """The benchmark suite's data sets, with its preprocessing."""
    from suite import load as suite_load

    return suite_load(name)


def cached(name: str, fit) -> np.ndarray:
    """A seed's embedding, kept in the suite's cache directory between runs of this study."""
    from suite import CACHE

    path = CACHE / "reliability" / f"{name}.npy"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, np.asarray(fit(), dtype=np.float64))
    return np.load(path)


def movement(embeddings: list[np.ndarray]) -> np.ndarray:
    """Per-point RMS distance to its mean aligned position, in units of the map's RMS radius."""
    ref = embeddings[0]
    A = np.stack([ref] + [procrustes_align(E, ref) for E in embeddings[1:]])
    A = A - A.mean(1, keepdims=True)
    A = A / np.sqrt((A ** 2).sum(-1).mean(-1))[:, None, None]
    return np.sqrt(((A - A.mean(0)) ** 2).sum(-1).mean(0))


def neighbourhood_change(embeddings: list[np.ndarray], k: int = 15) -> np.ndarray:
    """Per-point mean Jaccard distance between its k-NN set in each other seed's map and in the
    first: the change of neighbours a user sees, blind to where whole clusters are placed."""
    from sklearn.neighbors import NearestNeighbors

    def knn(E):
        return NearestNeighbors(n_neighbors=k + 1).fit(E).kneighbors(E, return_distance=False)[:, 1:]

    ref = knn(embeddings[0])
    out = np.zeros(len(ref))
    for E in embeddings[1:]:
        other = knn(E)
        inter = np.array([len(np.intersect1d(a, b, assume_unique=True)) for a, b in zip(ref, other, strict=True)])
        out += 1.0 - inter / (2 * k - inter)
    return out / max(len(embeddings) - 1, 1)


def peer_fit(method: str, X, seed: int) -> np.ndarray:
    if method == "tsne":
        from openTSNE import TSNE

        return np.asarray(TSNE(random_state=seed, n_jobs=-1).fit(X))
    import umap

    return umap.UMAP(random_state=seed).fit_transform(X)


def ghostumap(X, y, peer_movement, peer_neighbours) -> dict:
    """GhostUMAP2's per-point instability (``pip install ghostumap==2.0.0``: 16 ghosts per
    point; a point's score is the distance from it to its farthest ghost) against the same
    targets: umap-learn's movement and neighbourhood change
    across seeds, and the 5-NN errors of its own embedding."""
    try:
        import ghostumap.ghostumap as gu
        from ghostumap import GhostUMAP2
    except ImportError:
        return {"ghostumap": "not installed"}
    # ghostumap 2.0.0 passes scikit-learn's force_all_finite, renamed ensure_all_finite in 1.6
    # and removed in 1.8: translate it, nothing else
    check = gu.check_array

    def check_array(*args, force_all_finite=True, **kw):
        return check(*args, ensure_all_finite=force_all_finite, **kw)

    gu.check_array = check_array
    t = time.perf_counter()
    mapper = GhostUMAP2(random_state=0)
    try:
        O, G = mapper.fit_transform(X, n_ghosts=16)[:2]
    except Exception as err:  # report a peer's failure, do not lose the row
        return {"ghostumap": f"failed: {type(err).__name__}: {err}"[:200]}
    finally:
        gu.check_array = check
    # a point's instability: the farthest of its ghosts from it (the (r, d)-stability distance)
    O, G = np.asarray(O), np.asarray(G)
    d = np.linalg.norm(G - O[:, None, :], axis=-1).max(1)
    wrong = loo_5nn_wrong(np.asarray(O), y)
    return dict(ghost_seconds=round(time.perf_counter() - t, 1),
                ghost_rho_peer=float(spearmanr(d, peer_movement)[0]),
                ghost_rho_peer_neighbours=float(spearmanr(d, peer_neighbours)[0]),
                ghost_auroc_5nn=float(roc_auc_score(wrong, d)) if 0 < wrong.sum() < len(wrong)
                else None)


def loo_5nn_wrong(E: np.ndarray, y: np.ndarray) -> np.ndarray:
    knn = KNeighborsClassifier(n_neighbors=6).fit(E, y)
    idx = knn.kneighbors(E, return_distance=False)[:, 1:]  # leave the point itself out
    votes = y[idx]
    pred = np.array([np.bincount(v).argmax() for v in votes])
    return pred != y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="digits")
    ap.add_argument("--method", choices=("tsne", "umap"), default="tsne")
    ap.add_argument("--inference", choices=("laplace", "svi", "hmc"), default="laplace")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--inference-params", type=json.loads, default=None, metavar="JSON",
                    help='the posterior\'s options, e.g. \'{"guide": "lowrank"}\'')
    ap.add_argument("--own-init", default=None,
                    help="the own seeds' initialisation (e.g. random; default: the estimator's)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    X, y = load(a.data)
    y = np.unique(np.asarray(y), return_inverse=True)[1]
    cls = probdr.TSNE if a.method == "tsne" else probdr.UMAP
    t = time.perf_counter()
    post = cls(random_state=0, inference=a.inference,
               inference_params=a.inference_params).fit(X)
    secs = time.perf_counter() - t
    # keyed by the fit's step count too, so that a change of the default schedule refits them
    # from random starts every seed is fitted here; else the posterior's MAP is seed 0
    init, tag = ({}, "") if a.own_init is None else ({"init": a.own_init}, f"-{a.own_init}")
    own = [] if a.own_init else [post.map_embedding_]
    own += [cached(f"{a.data}-{a.method}-probdr-{post.n_iter_}{tag}-{s}",
                   lambda s=s: cls(random_state=s, **init).fit_transform(X))
            for s in range(len(own), a.seeds)]
    peer = [cached(f"{a.data}-{a.method}-peer-{s}", lambda s=s: peer_fit(a.method, X, s))
            for s in range(a.seeds)]
    sd, rel = post.posterior_sd_, post.reliability_
    wrong = loo_5nn_wrong(post.map_embedding_, y)
    nb_own, nb_peer = neighbourhood_change(own), neighbourhood_change(peer)
    nb_post = 1.0 - rel  # the posterior's own neighbourhood change (reliability_)
    # the same at a third of the posterior's spread (point_reliability(spread=1/3))
    nb_third = 1.0 - post.posterior_.point_reliability(spread=1 / 3)
    row = dict(data=a.data, n=int(X.shape[0]), method=a.method, inference=a.inference,
               inference_params=a.inference_params, seeds=a.seeds, own_init=a.own_init,
               seconds_posterior_fit=round(secs, 1),
               rho_own=float(spearmanr(sd, movement(own))[0]),
               rho_peer=float(spearmanr(sd, movement(peer))[0]),
               rho_own_vs_peer=float(spearmanr(movement(own), movement(peer))[0]),
               rho_own_neighbours=float(spearmanr(sd, nb_own)[0]),
               rho_peer_neighbours=float(spearmanr(sd, nb_peer)[0]),
               rho_own_vs_peer_neighbours=float(spearmanr(nb_own, nb_peer)[0]),
               rho_own_reliability=float(spearmanr(nb_post, nb_own)[0]),
               rho_peer_reliability=float(spearmanr(nb_post, nb_peer)[0]),
               rho_own_reliability_third=float(spearmanr(nb_third, nb_own)[0]),
               rho_peer_reliability_third=float(spearmanr(nb_third, nb_peer)[0]),
               median_reliability_third=float(np.median(1.0 - nb_third)),
               auroc_5nn=float(roc_auc_score(wrong, sd)) if 0 < wrong.sum() < len(wrong)
               else None,
               auroc_5nn_reliability=float(roc_auc_score(wrong, -rel))
               if 0 < wrong.sum() < len(wrong) else None,
               wrong_5nn=float(wrong.mean()), median_reliability=float(np.median(rel)))
    if a.method == "umap":
        row.update(ghostumap(X, y, movement(peer), nb_peer))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
