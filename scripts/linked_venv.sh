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
