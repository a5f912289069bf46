"""Measuring the search itself: ablations of its settings (``maxcode ablate``)."""
