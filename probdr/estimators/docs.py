"""The estimators' reference: one description per parameter and fitted attribute that several
estimators share, and :func:`reference`, which assembles a class's docstring from them.

A parameter means the same thing in every estimator that has it, so its description is written
once, beside its constraint, in the row of the one table
:data:`probdr.estimators.params.TABLE` (:data:`PARAMETERS` below reads them). A class decorated with :func:`reference` writes in its docstring only
what is its own: the summary, the entries of the parameters whose meaning is particular to it,
its attributes, See Also, Notes, Examples. :func:`reference` then writes the Parameters section:
every ``__init__`` parameter, in signature order, with the class's own entry, else the entry of
its nearest documented base class (the presets take the family's from :class:`GraphCoupling`),
else the shared one, and the default read from the signature (``type, default=value``). In the
Attributes section, an entry written as a bare name takes its description the same way.

The result is plain numpydoc text: ``help()`` shows it as Sphinx does. A parameter with no
description anywhere, or an entry naming no parameter, fails at import.
"""

from __future__ import annotations

import inspect
import textwrap

from .params import TABLE

__all__ = ["PARAMETERS", "ATTRIBUTES", "reference", "parse_entries"]

_INDENT = "    "


def parse_entries(text: str) -> dict[str, tuple[str, list[str]]]:
    """The entries of a numpydoc Parameters or Attributes section: ``{name: (type,
    description lines)}`` in order; an entry is a line ``name : type`` (or a bare ``name``)
    followed by its indented description."""
    entries: dict[str, tuple[str, list[str]]] = {}
    body: list[str] = []
    for line in textwrap.dedent(text).splitlines():
        if line.strip() and not line[0].isspace():
            name, _, kind = line.partition(" : ")
            body = []
            entries[name.strip()] = (kind.strip(), body)
        elif entries:
            body.append(line)
    return {name: (kind, _dedent(body)) for name, (kind, body) in entries.items()}


def _dedent(lines: list[str]) -> list[str]:
    text = textwrap.dedent("\n".join(lines)).strip("\n")
    return text.splitlines() if text else []


def table_entries() -> dict[str, tuple[str, list[str]]]:
    """The entries of the parameters that the one table describes
    (:data:`probdr.estimators.params.TABLE`, each beside its constraint), as read now."""
    return parse_entries("\n".join(f"{name} : {row.doc}" for name, row in TABLE.items()
                                    if row.doc is not None))


#: the description of every parameter that the one table describes
PARAMETERS = table_entries()

#: the description of every fitted attribute shared by estimators of several families
ATTRIBUTES = parse_entries("""
embedding_ : ndarray of shape (n_samples, n_components)
    The embedding, float64 (``fit_transform`` returns it as numpy, or as a torch tensor on the
    input's device for torch input).
input_ : probdr.input.InputGraph
    The fitted input side: the calibration (bandwidths), the metric and the training points,
    against which ``transform`` places new points.
input_graph_ : GraphLaw
    The law of the input graph W_X given X: ``.mean`` is E[W_X], ``.sample()`` draws a graph.
kernel_ : probdr.kernels.Kernel
    The latent kernel, with any number given as "learn" at its MAP value.
learned_kernel_params_ : dict
    {name: MAP value} of the kernel's learned numbers (empty when none is learned).
loss_history_ : ndarray
    The optimised objective at each recorded step.
n_iter_ : int
    Optimiser steps (or rounds) run.
stopped_by_callback_ : bool
    Whether a callback stopped the fit.
n_threads_ : int or None
    Threads of the fit, resolved from ``n_jobs``, which ``transform`` uses too (None: the
    process's setting).
device_ : torch.device
    Device of the fit, resolved from ``device``, which ``transform`` uses too.
random_state_ : int
    The integer seed of the fit, resolved from ``random_state``.
n_features_in_ : int
    Number of features seen in ``fit``.
n_samples_ : int
    Number of training points.
laplacian_ : KNNLaplacian
    The Laplacian L̂ = D - A of the symmetrised binary kNN graph (probdr.laws.wishart).
n_graph_components_ : int
    Connected components of the kNN graph.
posterior_ : probdr.infer.posterior.Posterior
    With ``inference="svi"``, ``"laplace"`` or ``"mcmc"``: the posterior draws of Z, Procrustes-aligned to the
    mode (``mode_embedding_``); ``posterior_mean_`` is their mean.
posterior_samples_ : ndarray of shape (draws, n_samples, n_components)
    With ``inference="svi"``, ``"laplace"`` or ``"mcmc"``: ``posterior_.samples``.
posterior_sd_ : ndarray of shape (n_samples,)
    With a posterior: each point's spread, sqrt(tr Σ_i / q) of its aligned draws.
reliability_ : ndarray of shape (n_samples,)
    With a posterior: each point's reliability in [0, 1], the share of its 15 nearest
    neighbours that the posterior keeps (Jaccard similarity of the neighbour sets of 20 draws
    and of the posterior mean; low: its neighbours in the map are not set by the data). A
    relative score: rank points by it.
stability_ : ndarray of shape (n_samples,)
    With a posterior: each point's stability in [0, 1], the posterior probability that it keeps
    at least 5 of its 15 nearest neighbours; below 0.5 the point more likely than not loses
    most of its neighbourhood (flag points with ``stability_ < 0.5``).
posterior_mean_ : ndarray of shape (n_samples, n_components)
    With ``inference="svi"``, ``"laplace"`` or ``"mcmc"``: the mean of the posterior draws,
    aligned to the mode (``mode_embedding_``) by Procrustes.
map_embedding_ : ndarray of shape (n_samples, n_components)
    With ``inference="svi"``, ``"laplace"`` or ``"mcmc"``: the MAP embedding of the schedule
    (``embedding_``), where the search for the posterior's mode starts.
mode_embedding_ : ndarray of shape (n_samples, n_components)
    With a posterior: the point the draws are centred on and aligned to: the mode of the
    posterior's density (the MAP continued until a convergence rule holds, probdr.infer.mode)
    with ``converge`` (Laplace's default), else the MAP.
map_converged_ : bool or None
    With a posterior: whether the mode search's rule held before its cap (None: no search).
mode_steps_ : int or None
    With a posterior: the mode search's L-BFGS calls (20 iterations each) or Adam steps.
z_prior_scale_ : float or None
    With ``inference="svi"``, ``"laplace"`` or ``"mcmc"``: the scale of the posterior's isotropic Gaussian
    prior on Z (None for a distribution given as ``z_prior``).
""")


def _sections(doc: str) -> list[tuple[str, list[str]]]:
    """A numpydoc docstring as ``(title, lines)`` pairs in order, the first titled ``""``
    (the summary); a title is a line underlined with as many dashes."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[tuple[str, list[str]]] = [("", [])]
    i = 0
    while i < len(lines):
        line, under = lines[i], lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.strip() and not line[0].isspace() and under and set(under) == {"-"} \
                and len(under) == len(line.strip()):
            out.append((line.strip(), []))
            i += 2
            continue
        out[-1][1].append(line)
        i += 1
    return [(title, _dedent(body) if title else _strip(body)) for title, body in out]


def _strip(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _inherited(cls, table_name: str, shared: dict) -> dict:
    """The entries a class may take: its nearest documented bases' first, then ``shared``."""
    out = dict(shared)
    for base in reversed(cls.__mro__[1:]):
        out.update(vars(base).get(table_name, {}))
    return out


def _default(value) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _entry(name: str, kind: str, body: list[str]) -> list[str]:
    head = f"{name} : {kind}" if kind else name
    return [head] + [_INDENT + line if line.strip() else "" for line in body]


def _parameters(cls, own: dict) -> tuple[list[str], dict]:
    """The Parameters section's lines and the resolved entries, in ``__init__`` order."""
    signature = inspect.signature(cls.__init__).parameters
    names = [n for n in signature if n != "self"]
    stray = sorted(set(own) - set(names))
    if stray:
        raise TypeError(f"{cls.__name__}'s docstring describes {stray}, which are not "
                        "parameters of its __init__.")
    known = {**_inherited(cls, "_doc_parameters", table_entries()), **own}
    missing = [n for n in names if n not in known or not known[n][1]]
    if missing:
        raise TypeError(f"{cls.__name__}: no description of the parameters {missing} (write "
                        "them in its docstring or in probdr.estimators.params.TABLE).")
    lines, resolved = [], {}
    for name in names:
        kind, body = resolved[name] = known[name]
        default = signature[name].default
        if default is not inspect.Parameter.empty:
            kind = f"{kind}, default={_default(default)}"
        lines += _entry(name, kind, body)
    return lines, resolved


def _attributes(cls, own: dict) -> tuple[list[str], dict]:
    """The Attributes section's lines: a bare name takes the inherited or shared entry."""
    known = _inherited(cls, "_doc_attributes", ATTRIBUTES)
    lines, resolved = [], {}
    for name, (kind, body) in own.items():
        if not kind and not body:
            if name not in known:
                raise TypeError(f"{cls.__name__}: no description of the attribute {name}.")
            kind, body = known[name]
        resolved[name] = (kind, body)
        lines += _entry(name, kind, body)
    return lines, resolved


def reference(cls):
    """Class decorator: complete ``cls.__doc__`` (see the module docstring) and keep the
    resolved entries for its subclasses (``_doc_parameters``, ``_doc_attributes``)."""
    sections = _sections(cls.__doc__ or "")
    titles = [title for title, _ in sections]
    if "Parameters" not in titles:
        sections.insert(1, ("Parameters", []))
    out = []
    for title, body in sections:
        if title == "Parameters":
            body, cls._doc_parameters = _parameters(cls, parse_entries("\n".join(body)))
        elif title == "Attributes":
            body, cls._doc_attributes = _attributes(cls, parse_entries("\n".join(body)))
        if title:
            out += ["", title, "-" * len(title)]
        out += body
    cls.__doc__ = "\n".join(out).strip("\n") + "\n"
    return cls
