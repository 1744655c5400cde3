"""Profiles -> fitted cost tables; validation against measurements."""
