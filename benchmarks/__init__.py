"""Side-by-side comparisons with peer tools; never part of the test pass/fail."""
