"""layer-locality: a mutating admission webhook that steers pods to nodes holding their layers."""

__version__ = "0.1.0"
