#!/bin/bash
# docs/knobs.md must equal what the knobs table (common/knobs.h) prints.
generator="$1"
checked_in="$2"
if ! diff -u "$checked_in" <("$generator"); then
  echo "docs/knobs.md is stale: run scripts/update_knobs_doc.sh" >&2
  exit 1
fi
