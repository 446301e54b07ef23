#!/usr/bin/env python3
"""schemas/workflow.schema.json against the C parser's verdicts.

usage: schema_check.py SCHEMA VALID.jsonl INVALID.jsonl [VALID_FILE ...]

Every line of VALID.jsonl and every VALID_FILE must validate; every line of
INVALID.jsonl (documents cnx_workflow_parse refuses for a field-level
reason) must not. Exit 0 when the schema agrees, 1 with the disagreements
listed otherwise. Run by tests/unit/workflow/test_workflow.c.
"""
import json
import sys

import jsonschema


def main(argv):
    with open(argv[1]) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    bad = []
    valid = []
    with open(argv[2]) as f:
        valid += [line for line in f.read().splitlines() if line]
    for path in argv[4:]:
        with open(path) as f:
            valid.append(f.read())
    for text in valid:
        errors = list(validator.iter_errors(json.loads(text)))
        if errors:
            bad.append("refused a valid document: %s\n  %s"
                       % (text[:200], errors[0].message))
    with open(argv[3]) as f:
        for line in f.read().splitlines():
            if not line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # malformed JSON is not the schema's business
            if validator.is_valid(doc):
                bad.append("accepted an invalid document: %s" % line[:300])
    for b in bad:
        print("schema_check:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
