"""The attention backend a launch pins: the user's, else the default for the visible GPU."""

import pytest

from replay.server.gpu import choose_attention_backend, default_backend, parse_compute_caps


@pytest.mark.parametrize("capability, backend", [
    ((10, 0), "fa4"),   # B200
    ((10, 3), "fa4"),   # B300
    ((11, 0), "fa4"),   # Thor
    ((9, 0), "fa3"),    # H100 / H200
    ((12, 0), "triton"),  # RTX 50 series: no FA4 kernels
    ((8, 0), "triton"),   # A100
    (None, "triton"),     # no GPU visible
])
def test_default_backend_per_gpu_generation(capability, backend):
    assert default_backend(capability) == backend


def test_nvidia_smi_output_is_read_one_gpu_per_line():
    assert parse_compute_caps("10.0\n10.0\n") == [(10, 0), (10, 0)]
    assert parse_compute_caps("[N/A]\n9.0\n") == [(9, 0)]


def test_the_users_backend_wins_without_probing():
    def probe():
        raise AssertionError("must not probe")
    choice = choose_attention_backend("triton", probe)
    assert choice.backend == "triton" and "given" in choice.line()


def test_the_default_says_which_gpu_it_was_chosen_for():
    choice = choose_attention_backend(None, lambda: ((10, 0), "nvidia-smi"))
    assert choice.line() == "attention backend fa4 (default for sm100, seen by nvidia-smi)"


def test_without_a_visible_gpu_the_default_is_triton_and_says_why():
    choice = choose_attention_backend(None, lambda: (None, "no GPU visible"))
    assert choice.line() == "attention backend triton (default: no GPU visible)"
