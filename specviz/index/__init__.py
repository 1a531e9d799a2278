"""Reusable data structures behind the drafters (tries, tables, pools)."""
