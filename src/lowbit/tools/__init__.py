"""Tools for seeing inside models: dump, compare, report."""
