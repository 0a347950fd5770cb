"""The HTTPS edge: the aiohttp server and its connection limits, TLS, metrics, the
async review pipeline (mutate.py) and the wiring of inventory, catalog and registry
into it."""
