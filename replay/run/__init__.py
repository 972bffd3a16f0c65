"""Driving one recording or one replay: the runner, recorder, replayer and journal."""
