"""Reports from records: tables, plots, statistics, regressions, publishing."""
