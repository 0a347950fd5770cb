"""A family of large synthetic images in the shape of accelerator images (issue 49): two
CUDA-like bases of four layers of 1-4 GB each (plus a small OS layer shared by both), and
framework images on them (a PyTorch-, TensorFlow-, JAX-, vLLM- and Triton-like one) that add
one or two framework layers of 1-3.5 GB, each framework in three tags that share the base's
and the framework's layers and differ only in a small top layer (40-300 MB).

The images, digests and sizes are SYNTHETIC: no registry was read. The sizes are chosen in
the range public CUDA runtime/cuDNN and framework images show as compressed layer sizes on
their registries' tag pages (a CUDA runtime's libraries and cuDNN in layers of one to a few
GB, a framework adding 2-5 GB, an image of 7-14 GB in all); they are round figures of that
shape, not copies of any image's manifest. What the benchmarks need from them is the shape:
few, very large layers shared by many tags, which nodes of an accelerator fleet all hold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers

AMD64 = Platform.of("linux", "amd64")
REGISTRY = "nvcr.example/synthetic"
MB = 1_000_000
GB = 1_000 * MB


def _sha(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def _layer(label: str, size: int) -> Layer:
    return Layer(_sha(f"accelerator layer {label}"), size)


OS_LAYER = _layer("os", 29 * MB)  # an Ubuntu-like root file system, under both bases
# CUDA-like bases: libraries, cuDNN, NCCL/cuBLAS, compat (the large layers, 1-4 GB each).
BASES: dict[str, tuple[Layer, ...]] = {
    "cuda-12.1": (_layer("cuda-12.1 libs", 3_100 * MB), _layer("cuda-12.1 cudnn", 1_200 * MB),
                  _layer("cuda-12.1 nccl", 2_400 * MB), _layer("cuda-12.1 compat", 1_000 * MB)),
    "cuda-12.4": (_layer("cuda-12.4 libs", 3_600 * MB), _layer("cuda-12.4 cudnn", 1_400 * MB),
                  _layer("cuda-12.4 nccl", 2_700 * MB), _layer("cuda-12.4 compat", 1_100 * MB)),
}


@dataclass(frozen=True)
class Framework:
    name: str
    base: str  # a key of BASES
    layers: tuple[Layer, ...]  # shared by every tag
    tags: tuple[str, ...]


FRAMEWORKS = (
    Framework("pytorch", "cuda-12.4", (_layer("pytorch wheels", 3_500 * MB),
                                       _layer("pytorch extras", 1_300 * MB)),
              ("2.3-py310", "2.3-py311", "2.4-py311")),
    Framework("tensorflow", "cuda-12.1", (_layer("tensorflow wheels", 2_900 * MB),),
              ("2.15-gpu", "2.16-gpu", "2.16-gpu-jupyter")),
    Framework("jax", "cuda-12.4", (_layer("jax wheels", 1_800 * MB),),
              ("0.4.28", "0.4.30", "0.4.30-dev")),
    Framework("vllm", "cuda-12.4", (_layer("vllm torch", 3_400 * MB),
                                    _layer("vllm kernels", 1_100 * MB)),
              ("0.5.0", "0.5.1", "0.5.1-openai")),
    Framework("triton", "cuda-12.1", (_layer("triton server", 2_600 * MB),
                                      _layer("triton backends", 1_900 * MB)),
              ("24.05-py3", "24.06-py3", "24.06-py3-min")),
)


def _image(ref: str, layers: tuple[Layer, ...]) -> ImageLayers:
    return ImageLayers(ref=ref, digest=_sha(f"index {ref}"),
                       platforms={AMD64: PlatformLayers(_sha(f"manifest {ref}"), layers)})


def accelerator_images() -> tuple[ImageLayers, ...]:
    """The bases (as images of their own) and every framework tag: base layers, then the
    framework's, then the tag's own small layer (sized by its position: 40-300 MB)."""
    images = [_image(f"{REGISTRY}/cuda:{name}", (OS_LAYER, *layers))
              for name, layers in BASES.items()]
    for framework in FRAMEWORKS:
        for k, tag in enumerate(framework.tags):
            top = _layer(f"{framework.name}:{tag} top", (40 + 130 * k) * MB)
            images.append(_image(f"{REGISTRY}/{framework.name}:{tag}",
                                 (OS_LAYER, *BASES[framework.base], *framework.layers, top)))
    return tuple(images)


def node_accelerators(family: tuple[ImageLayers, ...], i: int, every: int) -> list[ImageLayers]:
    """The family's images node `i` holds: one node in `every` is an accelerator node with
    its base and two tags of one framework (so tags share layers on the node as well), the
    others none."""
    if every <= 0 or i % every or not family:
        return []
    framework = FRAMEWORKS[(i // every) % len(FRAMEWORKS)]
    tags = [image for image in family if image.ref.startswith(f"{REGISTRY}/{framework.name}:")]
    base = next(image for image in family if image.ref == f"{REGISTRY}/cuda:{framework.base}")
    first = (i // every // len(FRAMEWORKS)) % len(tags)
    return [base, tags[first], tags[(first + 1) % len(tags)]]
