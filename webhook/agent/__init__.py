"""The node agent (`layer-locality agent`): reads the node's container runtime image store and
publishes a NodeLayers object, labels its own Node with its largest layers and renews its
node's Lease (docs/agent.md). Runtime access sits behind `RuntimeSource` (source.py);
containerd is the one implementation (containerd.py)."""
