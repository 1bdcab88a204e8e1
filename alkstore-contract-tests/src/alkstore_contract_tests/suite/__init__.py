"""The conformance suite: every test here runs against the engine under test."""
