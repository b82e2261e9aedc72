"""Reaching a node: remote calls under the guard, the helper forms,
the address (node, cookie, TLS), and local nodes for the demo and tests."""
