"""The one YAML (or JSON) document of a file, with a one-line error naming the file: the
settings file, a static NodeList, a pod to explain, the local cluster's node lists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


def one_document(text: str | bytes, source: str, what: str,
                 loader: type[yaml.SafeLoader] | None = None) -> Any:
    """The one YAML (or JSON) document of `text`; ValueError with a one-line message naming
    `source` for a syntax error or a stream of several documents (`what`: what one document
    should be, for the message). `loader`: a safe loader class (libyaml's CSafeLoader for big
    files); PyYAML's SafeLoader by default."""
    try:
        documents = [d for d in yaml.load_all(text, Loader=loader or yaml.SafeLoader)
                     if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{source}: not YAML/JSON{where}: {problem}") from exc
    if len(documents) > 1:
        kinds = ", ".join(str(d.get("kind", "mapping")) if isinstance(d, Mapping)
                          else type(d).__name__ for d in documents[:5])
        raise ValueError(f"{source}: {len(documents)} YAML documents ({kinds}); expected one "
                         f"{what}: split the file or give the one object")
    return documents[0] if documents else None
