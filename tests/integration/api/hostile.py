"""Hostile TrainingJobs: sending them, judging the apiserver's answer, and generating them.

A rejection is *field-level* when (precisely):

- the status is 400 or 422, and
- for 400 (strict decoding and typed-metadata errors, which list no causes): the message quotes a path
  under `spec`/`metadata` as `unknown field "<path>"` or `duplicate field "<path>"`, or names a metadata
  field as `Go struct field ObjectMeta.<field>` (the typed decoder of metadata), or metadata itself as
  `Go value of type v1.ObjectMeta`;
- for 422: every cause names a field under `spec`/`metadata` (or the top-level `kind`/`apiVersion`),
  either as its `field` (and the message repeats it as `<field>:`) or, for causes the apiserver files
  under `<nil>`, in its text: format checks say `... in spec.numNodes`, and CEL rules that could not be
  evaluated say `... evaluating rule: <the rule's message>`, which for our rules starts with the field.
  The only other `<nil>` cause allowed is the note that CEL rules were skipped because the schema
  already failed. At least one field must be named.

One apiserver limitation shows here: a whole-number float (`2.0`) at `spec.numNodes` passes the OpenAPI
integer check, and the root CEL rule that reads numNodes then fails with `<nil>: ... invalid data,
expected int, got float64 evaluating rule: metadata.name: ...` (the CEL adapter takes only Go ints for
`type: integer`; kubectl never sends `2.0`, it writes YAML `2.0` as `2`). No CEL rule can avoid it: the
message names the rule's field, metadata.name, and mutation tests accept that pairing (CROSS_FIELD).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from hypothesis import strategies as st
from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION
from tests.integration.api.admission import maximal_job
from multinode.testing import training_job
from localcluster.harness.operator import CRD_FILE

FIELD_ROOTS = ("spec", "metadata", "kind", "apiVersion")
SKIPPED_RULES_NOTE = "some validation rules were not checked"
FLOAT_QUIRK = "invalid data, expected int, got float64"

JsonPath = tuple[str | int, ...]


# ---- sending ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the apiserver made of one create (always a server-side dry run, strict field validation)."""

    status: int  # 201 when admitted
    message: str = ""
    causes: tuple[tuple[str, str], ...] = ()  # (field, message) of every cause
    stored: dict | None = None

    @property
    def admitted(self) -> bool:
        return self.status < 300


def _outcome(status: int, text: str) -> Outcome:
    try:
        body = json.loads(text)
    except (TypeError, ValueError):
        return Outcome(status, str(text))
    causes = (body.get("details") or {}).get("causes") or []
    return Outcome(status, body.get("message") or "",
                   tuple((c.get("field", ""), c.get("message", "")) for c in causes))


def send(custom: client.CustomObjectsApi, namespace: str, body: dict) -> Outcome:
    try:
        stored = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, copy.deepcopy(body),
                                                        dry_run="All", field_validation="Strict")
    except client.ApiException as e:
        return _outcome(e.status, e.body)
    return Outcome(201, stored=stored)


def send_yaml(api: client.ApiClient, namespace: str, text: str) -> Outcome:
    """POST a raw YAML document (the typed client only takes dicts, which cannot repeat a key)."""
    method, url, headers, body, _ = api.param_serialize(
        "POST", f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}", path_params={"namespace": namespace},
        query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
        header_params={"Content-Type": "application/yaml", "Accept": "application/json"}, body=text,
        auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers, body=body)
    response.read()
    text = response.data.decode("utf-8", "replace")
    if response.status < 300:
        return Outcome(response.status, stored=json.loads(text))
    return _outcome(response.status, text)


# ---- judging ---------------------------------------------------------------------------------------

_UNKNOWN_OR_DUPLICATE = re.compile(r'(?:unknown|duplicate) field "((?:[^"\\]|\\.)*)"')
_TYPED_METADATA = re.compile(r"Go struct field ObjectMeta\.(\S+) of type")
# `<nil>` causes that name their field in the text: format checks ("... in spec.numNodes") and CEL rules
# that failed to evaluate ("... evaluating rule: metadata.name: must be ...", our messages start with the field).
_NAMED_IN_TEXT = re.compile(r"(?:\bin |evaluating rule: )((?:spec|metadata)\b[^\s:,]*)")


def _rooted(path: str) -> bool:
    return any(path == root or path.startswith((f"{root}.", f"{root}[")) for root in FIELD_ROOTS)


def named_fields(outcome: Outcome) -> list[str]:
    """The spec/metadata paths a rejection names, after checking it is field-level (see module doc)."""
    assert outcome.status in (400, 422), f"not a 400/422 rejection: {outcome}"
    if outcome.status == 400:
        fields = [f for f in _UNKNOWN_OR_DUPLICATE.findall(outcome.message) if _rooted(f)]
        fields += [f"metadata.{f}" for f in _TYPED_METADATA.findall(outcome.message)]
        fields += ["metadata"] * ("Go value of type v1.ObjectMeta" in outcome.message)
        assert fields, f"400 names no spec/metadata field: {outcome.message[:2000]}"
        return fields
    fields = []
    for path, text in outcome.causes:
        if _rooted(path):
            assert f"{path}:" in outcome.message, f"cause {path} is not in the message: {outcome.message[:2000]}"
            fields.append(path)
            continue
        assert path == "<nil>", f"cause of an unexpected field {path!r}: {outcome}"
        in_text = [f for f in _NAMED_IN_TEXT.findall(text) if _rooted(f)]
        if in_text:
            fields.extend(in_text)
        elif SKIPPED_RULES_NOTE not in text:
            raise AssertionError(f"cause names no spec/metadata field ({text[:500]}) in {outcome}")
    assert fields, f"422 names no spec/metadata field: {outcome.message[:2000]}"
    return fields


def render(path: JsonPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# A spec field whose bad value is reported at another field, by the rule that relates them.
CROSS_FIELD = {"numNodes": {"metadata.name"}, "cache": {"spec.checkpointing"}, "checkpointing": {"spec.cache"}}


def names_mutated_field(fields: list[str], path: JsonPath) -> bool:
    """Some named field is the mutated field's top-level spec field (or metadata), or its rule's partner."""
    if path[0] == "metadata":
        return any(f.startswith("metadata") for f in fields)
    if len(path) == 1:
        return any(f.startswith("spec") for f in fields)
    top = f"spec.{path[1]}"
    partners = CROSS_FIELD.get(str(path[1]), set())
    return any(f == top or f.startswith((f"{top}.", f"{top}[")) or any(f.startswith(p) for p in partners)
               for f in fields)


# ---- JSON paths ------------------------------------------------------------------------------------


def walk(node: Any, prefix: JsonPath = ()) -> Iterator[JsonPath]:
    """Every path below `node` (not `node` itself), parents before children."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from walk(child, (*prefix, key))


def get_at(doc: Any, path: JsonPath) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def replaced(doc: dict, path: JsonPath, value: Any) -> dict:
    doc = copy.deepcopy(doc)
    get_at(doc, path[:-1])[path[-1]] = value
    return doc


def deleted(doc: dict, path: JsonPath) -> dict:
    doc = copy.deepcopy(doc)
    del get_at(doc, path[:-1])[path[-1]]
    return doc


def fingerprint(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=repr).encode()).hexdigest()[:12]


# ---- the schema ------------------------------------------------------------------------------------


def root_schema() -> dict:
    crd = yaml.safe_load(CRD_FILE.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


SCHEMA = root_schema()


def schema_at(path: JsonPath) -> dict | None:
    """The schema node of `path`, or None below a field that keeps unknown fields."""
    node: dict | None = SCHEMA
    for part in path:
        if node is None:
            return None
        if isinstance(part, int):
            node = node.get("items")
        else:
            node = (node.get("properties") or {}).get(part) or node.get("additionalProperties")
    return node


def required(path: JsonPath) -> bool:
    if path == ("metadata", "name"):
        return True  # the apiserver's own rule: name or generateName
    parent = schema_at(path[:-1])
    return bool(parent) and isinstance(path[-1], str) and path[-1] in parent.get("required", [])


def known_keys(path: JsonPath) -> set[str]:
    node = schema_at(path)
    return set((node or {}).get("properties") or {})


# ---- bases -----------------------------------------------------------------------------------------


def small_job() -> dict:
    """The training_job() base, with the lifecycle fields maximal_job() leaves out; one GPU per node, so
    that admitted mutants fit the fake nodes."""
    return training_job(
        "job", 2, gpus=1, env=[{"name": "DATA_DIR", "value": "/data"}],
        podTemplate={"labels": {"team": "ml"}, "tolerations": [{"operator": "Exists"}]},
        failurePolicy={"maxRestarts": 2, "restartStrategy": "Recreate", "backoff": {"initialSeconds": 1},
                       "rules": [{"action": "FailJob", "onExitCodes": [{"min": 3, "max": 3}]},
                                 {"action": "RestartWithoutCounting", "onNodeLoss": True, "onReasons": ["Evicted"]}]},
        activeDeadlineSeconds=86400, startupTimeoutSeconds=600, cleanPodPolicy="All",
        imageConsistency={"pinDigest": True, "onMismatch": "Report"}, podGroup={"minMember": 2},
        topology={"sameDomainLabel": "topology.kubernetes.io/zone"}, suspend=False)


BASES = {"maximal": maximal_job("job"), "small": small_job()}
MUTABLE_PATHS = {name: [p for p in walk(body) if p[0] in ("spec", "metadata")] for name, body in BASES.items()}
REQUIRED_PATHS = {name: [p for p in paths if required(p)] for name, paths in MUTABLE_PATHS.items()}
OBJECT_PATHS = {name: [p for p in paths if isinstance(get_at(body, p), dict)]
                for (name, body), paths in zip(BASES.items(), MUTABLE_PATHS.values(), strict=True)}


# ---- strategies ------------------------------------------------------------------------------------

# Strings as users and attackers write them: shell, SQL, templates, unicode, control characters.
NASTY_STRINGS = ["", " ", "$(rm -rf /)", "'; DROP TABLE jobs; --", "{{ .Values.x }}", "${HOME}", "\x00", "\n",
                 "a\u202eb", "\U0001F680", "ü", "-1", "1e400", "null", "true", "../../etc/passwd", "a" * 300,
                 "/dev/shm", "dshm", "MASTER_ADDR", "nvidia.com/gpu"]
json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**65), max_value=2**65)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
                | st.sampled_from(NASTY_STRINGS))
json_values = st.recursive(json_scalars, lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=8), children, max_size=3), max_leaves=8)
# Keys for inserted unknown fields: printable (the apiserver quotes keys with Go's %q, which escapes
# control characters, so those are checked by hand-written cases instead).
unknown_key_text = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters='"\\'),
                           min_size=1, max_size=12)


@dataclass(frozen=True)
class Mutant:
    kind: str  # replace | delete | insert
    base: str
    path: JsonPath
    body: dict

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.base}:{render(self.path)}"


@st.composite
def replacements(draw: st.DrawFn, base: str) -> Mutant:
    path = draw(st.sampled_from(MUTABLE_PATHS[base]))
    value = draw(json_values)
    return Mutant("replace", base, path, replaced(BASES[base], path, value))


@st.composite
def deletions(draw: st.DrawFn) -> Mutant:
    base = draw(st.sampled_from(sorted(BASES)))
    path = draw(st.sampled_from(REQUIRED_PATHS[base]))
    return Mutant("delete", base, path, deleted(BASES[base], path))


@st.composite
def insertions(draw: st.DrawFn) -> Mutant:
    base = draw(st.sampled_from(sorted(BASES)))
    parent = draw(st.sampled_from(OBJECT_PATHS[base]))
    known = known_keys(parent) | set(get_at(BASES[base], parent))
    key = draw(unknown_key_text.filter(lambda k: k not in known))
    return Mutant("insert", base, (*parent, key), replaced(BASES[base], (*parent, key), draw(json_values)))


def job_with_spec(spec: Any, name: str = "job") -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}


# Arbitrary trees for spec, with real field names as keys often enough to reach past "unknown field".
SPEC_KEYS = sorted(SCHEMA["properties"]["spec"]["properties"])
arbitrary_specs = json_values | st.dictionaries(st.sampled_from(SPEC_KEYS) | st.text(max_size=6), json_values,
                                                max_size=6)


def from_schema(node: dict | None, depth: int = 0) -> st.SearchStrategy:
    """Values shaped like `node` (right types, random contents and bounds): many pass admission."""
    if node is None or depth > 8 or "type" not in node:
        return json_values
    kind = node["type"]
    if kind == "object" and node.get("properties"):
        props = node["properties"]
        needed = set(node.get("required", []))
        return st.fixed_dictionaries({k: from_schema(props[k], depth + 1) for k in sorted(needed)},
                                     optional={k: from_schema(v, depth + 1) for k, v in props.items()
                                               if k not in needed})
    if kind == "object":
        values = from_schema(node.get("additionalProperties"), depth + 1) if node.get("additionalProperties") \
            else json_values
        return st.dictionaries(st.text(max_size=10) | st.sampled_from(["app", "a/b", "example.com/x"]), values,
                               max_size=3)
    if kind == "array":
        return st.lists(from_schema(node.get("items"), depth + 1), max_size=3)
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low, high = node.get("minimum", -(2**31)), node.get("maximum", 2**31)
        return st.integers(min_value=low - 2, max_value=high + 2) | st.integers(min_value=low, max_value=low + 4)
    if "enum" in node:
        return st.sampled_from(node["enum"]) | st.sampled_from(NASTY_STRINGS)
    strings = st.text(max_size=16) | st.sampled_from(NASTY_STRINGS)
    if "pattern" in node:
        strings = st.from_regex(node["pattern"], fullmatch=True).filter(lambda s: len(s) <= 63) | strings
    return strings


SPEC_SCHEMA = SCHEMA["properties"]["spec"]


@st.composite
def schema_shaped_specs(draw: st.DrawFn) -> dict:
    """Specs of the right shape; mostly with a node count small enough for the operator to create."""
    spec = draw(from_schema(SPEC_SCHEMA))
    if draw(st.integers(0, 3)):
        spec["numNodes"] = draw(st.integers(1, 4))
    return spec


# ---- the record of everything sent -------------------------------------------------------------------


@dataclass
class Sent:
    source: str  # hand-written | replace | delete | insert | arbitrary | schema-shaped
    id: str
    body: Any
    outcome: Outcome


class Ledger:
    """Everything sent, each distinct body once; and what the created jobs ended as ("Phase/Reason")."""

    def __init__(self) -> None:
        self.sent: dict[str, Sent] = {}
        self.runtime: dict[str, str] = {}

    def record(self, source: str, id_: str, body: Any, outcome: Outcome) -> None:
        self.sent.setdefault(fingerprint(body), Sent(source, id_, copy.deepcopy(body), outcome))

    def __repr__(self) -> str:  # short: hypothesis prints the arguments of a failing example
        return f"Ledger({len(self.sent)} sent)"

    def admitted(self, *sources: str) -> list[Sent]:
        return [s for s in self.sent.values() if s.outcome.admitted and (not sources or s.source in sources)]
