# Sourced by the engine installers (install_sglang.sh, install_sglang_cpu.sh, install_vllm.sh):
# an engine's own venv that sees the environment golden-replay was installed into ($PY: a venv, or
# the system's python3), so the CPU torch, golden-replay itself (`python -m replay.sglang_cpu`)
# and the rest are the user's, and that shadows only what the engine needs newer.
#
# Why a .pth and not only --system-site-packages: made from inside a venv, --system-site-packages
# gives the *base* interpreter's packages, not the venv's, so an engine installed from a user's
# venv saw neither its torch nor golden-replay. The venv is made with --system-site-packages (the
# base's packages, as before) and a .pth that adds the user environment's site directories after
# its own (scripts/user_env.py pth: `site.addsitedir`, so editable installs there work too).
# Written before pip runs: pip then counts what the user environment has as installed and fetches
# only what is missing or pinned differently (what it installs shadows the user's copy, untouched).
USER_SITE_PTH="00-golden-user-env.pth"

user_env_fingerprint() {  # one line that changes whenever the user environment does
    "$PY" scripts/user_env.py fingerprint
}

venv_site() {  # venv_site VENV: its site-packages
    "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

make_linked_venv() {  # make_linked_venv VENV: make (or refresh) VENV and its view of the user env
    local venv="$1"
    "$PY" -m venv --system-site-packages "$venv"
    "$PY" scripts/user_env.py pth > "$(venv_site "$venv")/$USER_SITE_PTH"
}

# The steps every engine installer shares. Each installer sets NAME (its messages' prefix), VENV,
# VPY (the venv's python), STAMP (the file a complete install writes), WANT (what it records:
# pins and the user environment's fingerprint) and START (its start, `date +%s`) first.
stamp_step() {  # stamp_step "$@": `--stamp` prints WANT; a venv stamped WANT is already installed
    if [ "${1:-}" = "--stamp" ]; then  # what a complete install records (tests compare it)
        echo "$WANT"
        exit 0
    fi
    if [ -x "$VPY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
        echo "$NAME: already installed in $VENV ($(( $(date +%s) - START )) s)"
        exit 0
    fi
}

link_only_step() {  # link_only_step "$@", after make_linked_venv: `--link-only` stops here
    if [ "${1:-}" = "--link-only" ]; then  # the venv and its view of the user env, no packages
        echo "$NAME: linked $VENV to $("$PY" -c 'import sys; print(sys.prefix)') (no packages installed)"
        exit 0
    fi
}

torch_constraint() {  # torch_constraint VERSION: a pip constraints file that keeps the CPU torch
    echo "torch==$1" > "$VENV/golden-constraints.txt"
    echo "$VENV/golden-constraints.txt"
}
