"""File plumbing: where specviz caches (cachedir), the files it ships (resources), user files read
and written safely (user_files: depth-limited JSON, checked output paths, atomic writes), JSON
schemas (json_schema) and JSON Lines (jsonl). Below everything but errors.py."""
