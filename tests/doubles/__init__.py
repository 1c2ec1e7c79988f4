"""Test doubles: deliberately wrong components that tests use to prove the tool catches them."""
