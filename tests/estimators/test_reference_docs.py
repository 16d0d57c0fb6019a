"""Every public estimator has its numpydoc reference: a Parameters section naming exactly its
``__init__`` parameters (each with a type, its default and a description), Attributes, See Also
and Examples that run; ``help()`` shows it as plain text. The docstrings are assembled by
:func:`probdr.estimators.docs.reference` from the shared descriptions; its rules are tested here
too."""

from __future__ import annotations

import doctest
import inspect
import pydoc
import warnings

import pytest
from numpydoc.docscrape import ClassDoc

import probdr
from probdr.estimators import docs, fitted
from probdr.estimators.base import DREstimator

ESTIMATORS = [getattr(probdr, name) for name in probdr.estimators.__all__
              if isinstance(getattr(probdr, name), type)
              and issubclass(getattr(probdr, name), DREstimator)]
#: fitted attributes that exist only after a posterior fit (``inference="svi"`` or ``"mcmc"``)
POSTERIOR_ATTRIBUTES = {"posterior_", "posterior_samples_", "posterior_sd_", "reliability_",
                        "stability_", "map_embedding_", "posterior_mean_", "z_prior_scale_",
                        "mode_embedding_", "map_converged_", "mode_steps_"}


def _doc(cls) -> ClassDoc:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unknown section or a malformed entry fails
        return ClassDoc(cls, config={"show_class_members": False})


def _init_names(cls) -> list[str]:
    return [n for n in inspect.signature(cls.__init__).parameters if n != "self"]


def test_every_public_estimator_is_covered():
    names = {cls.__name__ for cls in ESTIMATORS}
    assert {"TSNE", "UMAP", "SNE", "LargeVis", "GraphCoupling", "WishartPCA", "ccPCA",
            "LaplacianWishart", "WishartEigenmaps", "SNEkhorn", "TSNEkhorn", "DistR", "GWMDS",
            "ProbDR"} <= names


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_parameters_section_names_exactly_the_init_parameters(cls):
    params = _doc(cls)["Parameters"]
    names = [p.name for p in params]
    assert names == _init_names(cls)  # in signature order
    assert sorted(names) == sorted(cls().get_params())
    signature = inspect.signature(cls.__init__).parameters
    for p in params:
        assert " ".join(p.desc).strip(), f"{cls.__name__}.{p.name} has no description"
        default = signature[p.name].default
        shown = f'"{default}"' if isinstance(default, str) else repr(default)
        assert p.type.endswith(f", default={shown}"), (p.name, p.type)
        assert p.type.count("default=") == 1, (p.name, p.type)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_summary_attributes_see_also_and_examples(cls):
    doc = _doc(cls)
    assert doc["Summary"] and doc["Extended Summary"] is not None
    attributes = {a.name for a in doc["Attributes"]}
    assert {"embedding_", "n_threads_", "device_", "random_state_"} <= attributes
    assert all(" ".join(a.desc).strip() for a in doc["Attributes"])
    assert doc["See Also"]
    assert any(line.startswith(">>>") for line in doc["Examples"])


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_help_is_plain_text_and_shows_every_parameter(cls):
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert ":math:" not in text and "math::" not in text
    for name in _init_names(cls):
        assert f"\n |  {name} : " in text, name
    # transform's options are not metadata: no scikit-learn routing block
    assert "set_transform_request" not in text
    # the first screen is the summary, then the Parameters
    head = inspect.getdoc(cls).splitlines()
    assert head.index("Parameters") < 20


def test_documented_thresholds_are_the_code_constants():
    text = probdr.GraphCoupling.__doc__
    assert f"above {fitted.FFT_REPULSION_MIN_N:,} points" in text
    assert f"exact up to {fitted.EXACT_REPULSION_MAX_N:,} points" in text


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_examples_run_and_the_documented_attributes_exist(cls):
    (test,) = doctest.DocTestFinder(recurse=False).find(cls, cls.__name__, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner.run(test, clear_globs=False)
    assert runner.failures == 0 and runner.tries > 3, f"{cls.__name__}'s Examples failed"
    fitted = [v for v in test.globs.values() if type(v) is cls and hasattr(v, "embedding_")]
    assert fitted, f"{cls.__name__}'s Examples fit no {cls.__name__}"
    documented = {a.name for a in _doc(cls)["Attributes"]} - POSTERIOR_ATTRIBUTES
    missing = sorted(a for a in documented if not hasattr(fitted[0], a))
    assert not missing, f"{cls.__name__} documents attributes a fit does not set: {missing}"


# -- the assembly rules -------------------------------------------------------------------------
def _toy(doc: str, base=object):
    class Toy(base):
        def __init__(self, n_components=2, *, alpha=0.5, random_state=None):
            pass
    Toy.__doc__ = doc
    return Toy


def test_reference_orders_by_signature_and_fills_shared_entries_and_defaults():
    Toy = docs.reference(_toy('''Summary.

    Parameters
    ----------
    alpha : float
        Its own weight.

    Attributes
    ----------
    embedding_
    extra_ : int
        Its own.
    '''))
    parsed = ClassDoc(Toy, config={"show_class_members": False})
    params = parsed["Parameters"]
    assert [p.name for p in params] == ["n_components", "alpha", "random_state"]
    assert params[0].type == "int, default=2" and params[1].type == "float, default=0.5"
    assert params[0].desc == docs.PARAMETERS["n_components"][1]
    assert [a.name for a in parsed["Attributes"]] == ["embedding_", "extra_"]
    assert parsed["Attributes"][0].desc == docs.ATTRIBUTES["embedding_"][1]
    # a subclass takes its base's own entries
    Sub = docs.reference(_toy("Sub.", base=Toy))
    assert "Its own weight." in Sub.__doc__


def test_reference_refuses_missing_and_stray_parameters():
    class Bare:
        def __init__(self, undocumented_knob=1):
            pass
    Bare.__doc__ = "Summary."
    with pytest.raises(TypeError, match="undocumented_knob"):
        docs.reference(Bare)
    with pytest.raises(TypeError, match="gone"):
        docs.reference(_toy("Summary.\n\nParameters\n----------\ngone : int\n    Old.\n"))
    own = "Parameters\n----------\nalpha : float\n    Its weight.\n"
    with pytest.raises(TypeError, match="mystery_"):
        docs.reference(_toy(f"Summary.\n\n{own}\nAttributes\n----------\nmystery_\n"))


def test_one_row_gives_a_new_parameter_its_constraint_and_its_entry(monkeypatch):
    """Adding a parameter is two places: the ``__init__`` entry and one row of the table
    (probdr.estimators.params.TABLE), from which the class gets its constraint (scikit-learn's
    validation) and its docstring entry (``reference``)."""
    from sklearn.utils._param_validation import InvalidParameterError

    from probdr.estimators.params import TABLE, Num, Row

    monkeypatch.setitem(TABLE, "smoothing", Row([Num(0, 1)], "float\n    How much to smooth."))

    @docs.reference
    class Smoother(DREstimator):
        """A smoother."""

        def __init__(self, smoothing=0.5):
            self.smoothing = smoothing

        def _fit(self, X, y=None):  # pragma: no cover - never fitted here
            raise NotImplementedError

    assert "smoothing : float, default=0.5\n    How much to smooth." in Smoother.__doc__
    assert Smoother._parameter_constraints == {"smoothing": TABLE["smoothing"].constraint}
    with pytest.raises(InvalidParameterError, match="smoothing"):
        Smoother(smoothing=2.0)._validate_params()



PRESETS = [probdr.SNE, probdr.TSNE, probdr.LargeVis, probdr.UMAP, probdr.SNEkhorn,
           probdr.TSNEkhorn]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda c: c.__name__)
def test_a_parameter_added_to_graph_coupling_reaches_every_preset(monkeypatch, preset):
    """Adding a parameter shared by GraphCoupling and its presets is two places too: its entry in
    ``GraphCoupling.__init__`` and its row of the table. A preset's ``__init__`` is declared
    (probdr.estimators.presets.declare), not written out: it gets the parameter, its default,
    its constraint and its docstring entry; a preset that fixes it (a class attribute) does
    not."""
    from sklearn.utils._param_validation import InvalidParameterError

    from probdr.estimators.coupling import GraphCoupling
    from probdr.estimators.params import TABLE, Num, Row

    # place 1: GraphCoupling's __init__ entry (here added to the signature it reads)
    init = GraphCoupling.__init__
    signature = inspect.signature(init)

    def __init__(self, *args, smoothing=0.5, **kwargs):
        init(self, *args, **kwargs)
        self.smoothing = smoothing

    __init__.__signature__ = signature.replace(parameters=[
        *signature.parameters.values(),
        inspect.Parameter("smoothing", inspect.Parameter.KEYWORD_ONLY, default=0.5)])
    monkeypatch.setattr(GraphCoupling, "__init__", __init__)
    # place 2: the table's row
    monkeypatch.setitem(TABLE, "smoothing", Row([Num(0, 1)], "float\n    How much to smooth."))

    # the preset as its module declares it (a subclass is declared the same way)
    Preset = docs.reference(type(preset.__name__, (preset,), {"__doc__": "A preset."}))
    assert "smoothing" in _init_names(Preset)
    assert "smoothing : float, default=0.5\n    How much to smooth." in Preset.__doc__
    assert Preset._parameter_constraints["smoothing"] == TABLE["smoothing"].constraint
    est = Preset(smoothing=0.25)
    assert est.get_params()["smoothing"] == 0.25 and Preset().smoothing == 0.5
    with pytest.raises(InvalidParameterError, match="smoothing"):
        Preset(smoothing=2.0)._validate_params()
    # the rest of the preset is as declared: its parameters and defaults, GraphCoupling's more
    before = inspect.signature(preset.__init__).parameters
    after = inspect.signature(Preset.__init__).parameters
    assert [n for n in after if n != "smoothing"] == list(before)
    assert all(after[n].default is before[n].default or after[n].default == before[n].default
               for n in before)
    # a preset that fixes the choice (a class attribute) leaves it out
    Fixed = type(preset.__name__, (preset,), {"smoothing": 0.0})
    assert "smoothing" not in _init_names(Fixed)


def test_presets_are_declared_not_written_out():
    """No preset writes its ``__init__``: each signature is GraphCoupling's, less the choices the
    preset fixes (class attributes), with the preset's own parameters and defaults."""
    from probdr.estimators import presets
    from probdr.estimators.coupling import GraphCoupling

    family = inspect.signature(GraphCoupling.__init__).parameters
    for preset in PRESETS:
        params = inspect.signature(preset.__init__).parameters
        assert inspect.signature(preset.__init__) == presets.preset_signature(preset)
        for name, p in params.items():
            if name in family and name not in preset._defaults:
                assert p.default == family[name].default, (preset.__name__, name)
            assert name in family or name in preset._defaults or name == "self"
        fixed = set(family) - set(params)
        assert all(hasattr(preset, name) for name in fixed), preset.__name__
    # a wrong argument: Python's message for a written-out __init__
    with pytest.raises(TypeError, match=r"TSNE.__init__\(\) got an unexpected keyword"):
        probdr.TSNE(nonsense=1)
    with pytest.raises(TypeError, match=r"UMAP.__init__\(\) too many positional"):
        probdr.UMAP(15, 2, 0.1)
