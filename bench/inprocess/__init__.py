"""Benchmarks measured in this process, or in a child it starts so that a VmRSS holds only what
it built; nothing served over the network:

- handler.py: what `handle_mutate` costs per review, minus HTTP and TLS (`python -m bench handler`);
- patch_size.py: the bytes a patch adds to a pod as stored;
- event_watch.py: what the kubelet `Pulled` event watch costs per event;
- nodelayers.py: the webhook's memory with NodeLayers objects, and an image's way from
  containerd to the index (a private containerd, the agent loop, a LiveInventory);
- agent.py: the node agent's one pass (`layer-locality agent --once`) over a private containerd.
"""
