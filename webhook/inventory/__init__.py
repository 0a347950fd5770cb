"""Which nodes hold which layers: node facts, the layer index, and the sources that feed it."""
