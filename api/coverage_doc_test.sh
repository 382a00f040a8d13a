#!/bin/bash
# docs/api_coverage.md must equal what the generator makes of the table.
generated="$1"
checked_in="$2"
if ! diff -u "$checked_in" "$generated"; then
  echo "docs/api_coverage.md is stale: run scripts/update_api_coverage.sh" >&2
  exit 1
fi
