"""Snapshots: the file format, taking them, comparing them."""
