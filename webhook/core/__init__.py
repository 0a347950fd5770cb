"""The decision: from a pod and the layer index to the patch, its annotation and its
reasons. Pure: no I/O, no asyncio, no aiohttp, kubernetes, prometheus_client or grpc
(pyproject.toml's import-linter contracts hold it so)."""
