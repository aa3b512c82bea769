"""Figures: one function per figure (DataFrame in, Figure out), saved to figures/ by :func:`style.savefig`."""
