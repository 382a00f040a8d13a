#!/bin/bash
# Regenerates docs/knobs.md from the knobs table (common/knobs.h).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //common:knobs_doc
bazel-bin/common/knobs_doc > docs/knobs.md
echo "docs/knobs.md updated"
