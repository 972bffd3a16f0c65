"""golden-replay: prove a prefix cache changes nothing, bit for bit."""

__version__ = "0.1.0"
