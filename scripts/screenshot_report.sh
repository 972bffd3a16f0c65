#!/usr/bin/env bash
# Regenerate the HTML-report screenshots in docs/img from the sample reports in tests/data/reports:
#   docs/img/report-failing.png  <- tests/data/reports/failing.json (1400x2000)
#   docs/img/report-passing.png  <- tests/data/reports/passing.json (1400x1600)
# Needs Debian's chromium (apt-get install -y chromium); pngquant, when installed, makes the PNGs
# smaller. The browser runs headless, offline (every host name resolves to nothing) and with a
# fresh profile that is removed afterwards. See docs/report-html.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
    echo "error: chromium is not installed (apt-get install -y chromium)" >&2
    exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

shoot() {  # shoot NAME HEIGHT
    local name="$1" height="$2"
    local page="$work/report-$name.html" png="docs/img/report-$name.png"
    python3 - "tests/data/reports/$name.json" "$page" <<'PY'
import sys
from pathlib import Path
from cli.report_cmd import load_report
from replay.report.html import write_html
write_html(load_report(Path(sys.argv[1])), sys.argv[2])
PY
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$work/profile-$name" --host-resolver-rules="MAP * ~NOTFOUND" \
        --hide-scrollbars --force-device-scale-factor=1 --window-size="1400,$height" \
        --screenshot="$png" "file://$page" >/dev/null 2>&1
    if command -v pngquant >/dev/null 2>&1; then
        pngquant --force --skip-if-larger --quality=70-95 --output "$png" -- "$png" || true
    fi
    echo "$png: $(wc -c <"$png") bytes"
}

shoot failing 2000
shoot passing 1600
