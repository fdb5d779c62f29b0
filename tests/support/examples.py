"""The manifests the docs and examples show: every `examples/*.yaml` document, and every complete manifest in a
```yaml block of README.md and docs/*.md (tests/integration/docs/test_examples.py applies them; unit tests parse
them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from multinode.api import GROUP, VERSION
from tests.support.paths import DOCS, REPO, rel

DOC_FILES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
EXAMPLE_FILES = sorted((REPO / "examples").glob("*.yaml"))
TJ_API_VERSION = f"{GROUP}/{VERSION}"

# A fenced block: ```yaml at the start of a line, up to the closing fence.
YAML_FENCE = re.compile(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    source: str  # path:line of the block's first line
    text: str


@dataclass(frozen=True)
class Manifest:
    source: str  # examples/x.yaml, or docs/x.md:line
    obj: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.source}:{self.obj['kind']}/{self.obj['metadata']['name']}"

    @property
    def is_training_job(self) -> bool:
        return self.obj.get("apiVersion") == TJ_API_VERSION and self.obj.get("kind") == "TrainingJob"


def yaml_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(f"{rel(path)}:{text.count(chr(10), 0, m.start()) + 2}", m.group(1))
            for m in YAML_FENCE.finditer(text)]


def is_complete(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    meta = doc.get("metadata")
    if not (doc.get("apiVersion") and doc.get("kind") and isinstance(meta, dict) and meta.get("name")):
        return False
    return doc["kind"] != "TrainingJob" or isinstance(doc.get("spec"), dict)


def documents(text: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def doc_blocks() -> list[Block]:
    return [block for path in DOC_FILES for block in yaml_blocks(path)]


def doc_manifests() -> list[Manifest]:
    found = []
    for block in doc_blocks():
        try:
            docs = documents(block.text)
        except yaml.YAMLError:
            continue  # test_every_yaml_block_in_the_docs_parses reports it
        found += [Manifest(block.source, d) for d in docs if is_complete(d)]
    return found


def example_manifests() -> list[Manifest]:
    return [Manifest(rel(path), d) for path in EXAMPLE_FILES for d in documents(path.read_text())]


DOC_MANIFESTS = doc_manifests()
EXAMPLE_MANIFESTS = example_manifests()
ALL_MANIFESTS = EXAMPLE_MANIFESTS + DOC_MANIFESTS
