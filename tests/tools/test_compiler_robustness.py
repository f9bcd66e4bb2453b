"""Never a crash: mutated fixture specs (values replaced by other JSON types, keys dropped) either
compile or are refused with a SpecRefused; nothing else escapes. Seeded, so failures replay."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from apps.tools.compiler import SpecRefused, compile_spec

FIXTURES = Path(__file__).parent / "fixtures"
ODD_VALUES = [None, True, 0, -1, 1.5, "", "x", [], {}, [1, "a"], {"$ref": "#/nowhere"}, {"type": 5},
              {"$ref": "#/components"}, "#/components/schemas", {"x-agent-capability": 1}]


def nodes(document, path=()):
    yield path
    if isinstance(document, dict):
        for key, value in document.items():
            yield from nodes(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from nodes(value, (*path, index))


def mutate(document, rng: random.Random):
    document = json.loads(json.dumps(document))
    paths = [path for path in nodes(document) if path]
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(paths)
        parent = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            if isinstance(parent, dict) and rng.random() < 0.3:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = json.loads(json.dumps(rng.choice(ODD_VALUES)))
        except (KeyError, IndexError, TypeError):
            continue
    return document


@pytest.mark.parametrize("fixture", ["store.yaml", "no_acc.json", "refs.yaml", "acc_invalid.yaml"])
def test_mutated_specs_compile_or_are_refused(fixture):
    base = yaml.safe_load((FIXTURES / fixture).read_bytes())
    rng = random.Random(fixture)
    outcomes = {"compiled": 0, "refused": 0}
    for _ in range(150):
        data = json.dumps(mutate(base, rng)).encode()
        try:
            compile_spec(data)
        except SpecRefused:
            outcomes["refused"] += 1
        else:
            outcomes["compiled"] += 1
    assert outcomes["compiled"] > 0 and outcomes["refused"] > 0


@pytest.mark.parametrize("fixture", ["store.yaml", "no_acc.json", "refs.yaml", "acc_invalid.yaml"])
def test_compile_stages_after_validation_survive_anything_the_validator_might_let_through(fixture):
    from apps.tools.compiler.compile import _Compiler
    from apps.tools.compiler.refs import Resolver

    base = yaml.safe_load((FIXTURES / fixture).read_bytes())
    rng = random.Random("unvalidated-" + fixture)
    compiled = 0
    for _ in range(300):
        document = mutate(base, rng)
        if not isinstance(document, dict):
            continue
        resolver = Resolver(document)
        try:
            resolver.check_all()
        except SpecRefused:
            continue
        _Compiler(document, resolver, "3.1.0", "0" * 64).run()
        compiled += 1
    assert compiled > 100
