"""A null admission webhook: the same framework (aiohttp), the same TLS settings
(webhook.serving.tls.ServingCertificate) and the same server options as `layer-locality
serve`, but it answers every review `allowed: true` with no work beyond decoding the uid.
The end-to-end benchmark's reference point.

    python -m tests.kit.null_webhook --listen 127.0.0.1:PORT --tls-cert FILE --tls-key FILE
"""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
from aiohttp import web

from webhook.serving.tls import ServingCertificate


async def mutate(request: web.Request) -> web.Response:
    body = await request.read()
    uid = orjson.loads(body)["request"]["uid"]
    answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "response": {"uid": uid, "allowed": True}}
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.kit.null_webhook")
    parser.add_argument("--listen", default="127.0.0.1:9443")
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    certificate = ServingCertificate(Path(args.tls_cert), Path(args.tls_key))
    app = web.Application(client_max_size=7 << 20)
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", healthz)
    web.run_app(app, host=host, port=int(port), ssl_context=certificate.context,
                access_log=None, print=None, handle_signals=True)


if __name__ == "__main__":
    main()
