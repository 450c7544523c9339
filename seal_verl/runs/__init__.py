"""Tools that read a run folder: checks, reports, the console watcher."""
