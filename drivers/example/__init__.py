"""A fake-device driver: the template third-party driver authors copy."""
