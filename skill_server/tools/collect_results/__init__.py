"""Tool ``collect_results``: ``results.md``, ``metrics.png`` and ``finish.flag`` for a run."""
