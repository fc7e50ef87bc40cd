"""Runnable examples; a package so that `--agent examples.<module>:<function>` imports them."""
