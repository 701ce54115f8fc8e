"""Dagster assets and asset checks: thin wrappers that run ``cdc_core`` per source."""
