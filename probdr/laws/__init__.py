"""Graph laws and priors (Van Assel et al. 2022, Proposition 1) with their supports, the doubly
stochastic law of SNEkhorn, edge priors, connected components of posterior graphs, and the
Wishart laws of the precision couplings. Laws import the solvers (``probdr.ot``) and kernels,
never the input side, models, inference or estimators."""

from . import (
               components,
               doubly_stochastic,
               edge_priors,
               graph,
               graph_support,
               simulate,
               weights,
               wishart,
)
from .components import *  # noqa: F403
from .doubly_stochastic import *  # noqa: F403
from .edge_priors import *  # noqa: F403
from .graph import *  # noqa: F403
from .graph_support import *  # noqa: F403
from .simulate import *  # noqa: F403
from .weights import *  # noqa: F403
from .wishart import *  # noqa: F403

__all__ = (components.__all__ + doubly_stochastic.__all__ + edge_priors.__all__ + graph.__all__
           + graph_support.__all__ + simulate.__all__ + weights.__all__ + wishart.__all__)
