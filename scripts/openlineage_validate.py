#!/usr/bin/env python3
"""Validate OpenLineage events against the spec's JSON schemas.

Usage: openlineage_validate.py SPEC_DIR EVENTS.jsonl [EXTRA_SCHEMA.json ...]

SPEC_DIR holds OpenLineage.json and facets/*.json (tests/openlineage/); EXTRA_SCHEMA files
are producers' own facet schemas (idemlake's run facet). Every event is validated against
the core schema (the RunEvent of OpenLineage.json), then every facet in it -- run, job,
dataset, input and output facets -- against the schema its `_schemaURL` names, resolved by
`$id` among the loaded schemas (a facet whose schema is not among them fails), with its key
checked against the property the facet schema declares. Formats (uuid, date-time, uri) are
checked. Prints one line per problem and exits 1 if there is any, else prints the number of
events and facets checked and exits 0.
"""

import json
import sys
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource


def load_schemas(spec_dir, extra):
    files = [spec_dir / "OpenLineage.json", *sorted((spec_dir / "facets").glob("*.json"))]
    files += [Path(p) for p in extra]
    schemas = {}
    for f in files:
        doc = json.loads(f.read_text())
        schemas[doc["$id"]] = doc
    registry = Registry().with_resources(
        (sid, Resource.from_contents(doc)) for sid, doc in schemas.items()
    )
    return schemas, registry


def facets_of(event):
    """(where, key, facet) for every facet of the event."""
    out = []
    for key, f in (event.get("run", {}).get("facets") or {}).items():
        out.append(("run.facets", key, f))
    for key, f in (event.get("job", {}).get("facets") or {}).items():
        out.append(("job.facets", key, f))
    for side in ("inputs", "outputs"):
        for i, d in enumerate(event.get(side) or []):
            for group in ("facets", "inputFacets", "outputFacets"):
                for key, f in (d.get(group) or {}).items():
                    out.append((f"{side}[{i}].{group}", key, f))
    return out


def check_event(n, event, schemas, registry, core):
    problems = []
    fmt = Draft202012Validator.FORMAT_CHECKER
    for e in Draft202012Validator(core, registry=registry, format_checker=fmt).iter_errors(event):
        problems.append(f"event {n}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    checked = 0
    for where, key, facet in facets_of(event):
        url = facet.get("_schemaURL", "") if isinstance(facet, dict) else ""
        base, _, fragment = url.partition("#")
        doc = schemas.get(base)
        if doc is None:
            problems.append(f"event {n}: {where}.{key}: no known schema for _schemaURL {url!r}")
            continue
        # The facet file declares the key it is written under (`"properties": {"parent": …}`).
        declared = doc.get("properties", {})
        if key not in declared:
            problems.append(
                f"event {n}: {where}.{key}: {base} declares facet key(s) {sorted(declared)}, not {key!r}"
            )
        schema = {"$ref": url if fragment else base}
        validator = Draft202012Validator(schema, registry=registry, format_checker=fmt)
        for e in validator.iter_errors(facet):
            path = "/".join(map(str, e.absolute_path))
            problems.append(f"event {n}: {where}.{key}/{path}: {e.message}")
        checked += 1
    return problems, checked


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    spec_dir, events_file = Path(sys.argv[1]), Path(sys.argv[2])
    schemas, registry = load_schemas(spec_dir, sys.argv[3:])
    core_id = json.loads((spec_dir / "OpenLineage.json").read_text())["$id"]
    core = {"$ref": f"{core_id}#/$defs/RunEvent"}
    problems, events, facets = [], 0, 0
    for n, line in enumerate(events_file.read_text().splitlines()):
        if not line.strip():
            continue
        event = json.loads(line)
        p, checked = check_event(n, event, schemas, registry, core)
        problems += p
        events += 1
        facets += checked
    for p in problems:
        print(p)
    if problems:
        return 1
    if events == 0:
        print("no events")
        return 1
    print(f"{events} events, {facets} facets valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
