"""Tests of the control API, ConduitClient and the wire protocol document."""
