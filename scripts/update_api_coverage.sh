#!/bin/bash
# Regenerates docs/api_coverage.md from the API table.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //api:generate
install -m 0644 bazel-bin/api/api_coverage.md docs/api_coverage.md
echo "docs/api_coverage.md updated"
