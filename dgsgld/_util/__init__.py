"""Private helpers every room uses: shape aliases, pytree arithmetic, host-side checks."""
