"""Query-aware dimension selection for the dense retriever (METHODS.md §3).

The code lives in the package's modules (``search.py`` for now); this file imports nothing.
"""
